package backupstore

import (
	"fmt"
	"slices"
	"time"
)

// Policy says which backups retention keeps: the newest Last, plus the newest
// of each of the Daily most recent days and the Weekly most recent ISO weeks
// that have a backup (UTC). Last 0 or less keeps everything, so the zero Policy
// deletes nothing; a negative Daily or Weekly counts as 0.
type Policy struct {
	Last, Daily, Weekly int
}

// Retain splits objs into those the policy keeps and those to delete, each
// newest first (by Created, then by name). It never drops the newest
// object, whatever the policy: a cluster always keeps its latest backup.
// It only decides; the caller deletes.
func Retain(objs []Object, p Policy) (keep, drop []Object) {
	sorted := slices.Clone(objs)
	sortNewestFirst(sorted)
	if len(sorted) == 0 {
		return nil, nil
	}
	if p.Last <= 0 {
		return sorted, nil
	}
	kept := make([]bool, len(sorted))
	for i := range min(p.Last, len(sorted)) {
		kept[i] = true
	}
	keepNewestPer(sorted, kept, p.Daily, func(t time.Time) string {
		return t.Format(time.DateOnly)
	})
	keepNewestPer(sorted, kept, p.Weekly, func(t time.Time) string {
		y, w := t.ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	})
	kept[0] = true
	for i, o := range sorted {
		if kept[i] {
			keep = append(keep, o)
		} else {
			drop = append(drop, o)
		}
	}
	return keep, drop
}

// keepNewestPer marks, in sorted (newest first), the first object of each
// of the n most recent periods named by period (a UTC day or ISO week).
func keepNewestPer(sorted []Object, kept []bool, n int, period func(time.Time) string) {
	seen := make(map[string]bool, max(n, 0))
	for i, o := range sorted {
		if len(seen) >= n {
			return
		}
		k := period(o.Created.UTC())
		if seen[k] {
			continue
		}
		seen[k] = true
		kept[i] = true
	}
}
