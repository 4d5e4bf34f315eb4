package backupstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/backupstore"
)

// orEmpty makes a nil list an empty one, to compare with names' result.
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Retain's policies, over backups whose names are their times.
func TestRetain(t *testing.T) {
	t.Parallel()
	at := func(s string) backupstore.Object {
		tm, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return backupstore.Object{Name: "prod/" + s + ".tar.age", Created: tm}
	}
	names := func(objs []backupstore.Object) []string {
		out := []string{}
		for _, o := range objs {
			out = append(out, o.Name[len("prod/"):len(o.Name)-len(".tar.age")])
		}
		return out
	}
	// 2026-05-03 is a Sunday (ISO week 18), 2026-05-04 a Monday (week 19).
	week := []backupstore.Object{
		at("2026-05-05T03:00:00Z"),
		at("2026-04-26T03:00:00Z"), // Sunday, week 17
		at("2026-05-04T15:00:00Z"),
		at("2026-05-04T03:00:00Z"),
		at("2026-05-03T23:00:00Z"),
		at("2026-05-03T03:00:00Z"),
		at("2026-05-02T03:00:00Z"),
		at("2026-04-20T03:00:00Z"),      // Monday, week 17
		at("2026-05-05T09:00:00+02:00"), // 07:00 UTC: the newest
	}
	for _, tc := range []struct {
		name       string
		objs       []backupstore.Object
		policy     backupstore.Policy
		keep, drop []string
	}{
		{
			name: "zero policy keeps everything", objs: week,
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-05T03:00:00Z", "2026-05-04T15:00:00Z", "2026-05-04T03:00:00Z",
				"2026-05-03T23:00:00Z", "2026-05-03T03:00:00Z", "2026-05-02T03:00:00Z", "2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "last 0 is no limit, whatever daily says", objs: week, policy: backupstore.Policy{Daily: 1, Weekly: 1},
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-05T03:00:00Z", "2026-05-04T15:00:00Z", "2026-05-04T03:00:00Z",
				"2026-05-03T23:00:00Z", "2026-05-03T03:00:00Z", "2026-05-02T03:00:00Z", "2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "last 3", objs: week, policy: backupstore.Policy{Last: 3},
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-05T03:00:00Z", "2026-05-04T15:00:00Z"},
			drop: []string{"2026-05-04T03:00:00Z", "2026-05-03T23:00:00Z", "2026-05-03T03:00:00Z", "2026-05-02T03:00:00Z",
				"2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "last 1, daily 3: the newest of the last three days that have one", objs: week, policy: backupstore.Policy{Last: 1, Daily: 3},
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-04T15:00:00Z", "2026-05-03T23:00:00Z"},
			drop: []string{"2026-05-05T03:00:00Z", "2026-05-04T03:00:00Z", "2026-05-03T03:00:00Z", "2026-05-02T03:00:00Z",
				"2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "weekly across the Sunday-Monday boundary", objs: week, policy: backupstore.Policy{Last: 1, Weekly: 3},
			// week 19: the 5th 07:00; week 18: Sunday the 3rd 23:00; week 17: the 26th.
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-03T23:00:00Z", "2026-04-26T03:00:00Z"},
			drop: []string{"2026-05-05T03:00:00Z", "2026-05-04T15:00:00Z", "2026-05-04T03:00:00Z", "2026-05-03T03:00:00Z",
				"2026-05-02T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "days without backups do not count", objs: week, policy: backupstore.Policy{Last: 1, Daily: 6},
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-04T15:00:00Z", "2026-05-03T23:00:00Z", "2026-05-02T03:00:00Z",
				"2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
			drop: []string{"2026-05-05T03:00:00Z", "2026-05-04T03:00:00Z", "2026-05-03T03:00:00Z"},
		},
		{
			name: "last, daily and weekly together", objs: week, policy: backupstore.Policy{Last: 2, Daily: 2, Weekly: 2},
			keep: []string{"2026-05-05T09:00:00+02:00", "2026-05-05T03:00:00Z", "2026-05-04T15:00:00Z", "2026-05-03T23:00:00Z"},
			drop: []string{"2026-05-04T03:00:00Z", "2026-05-03T03:00:00Z", "2026-05-02T03:00:00Z",
				"2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "the newest is kept even by a policy that keeps nothing else", objs: week, policy: backupstore.Policy{Last: 1, Daily: -1, Weekly: -5},
			keep: []string{"2026-05-05T09:00:00+02:00"},
			drop: []string{"2026-05-05T03:00:00Z", "2026-05-04T15:00:00Z", "2026-05-04T03:00:00Z", "2026-05-03T23:00:00Z",
				"2026-05-03T03:00:00Z", "2026-05-02T03:00:00Z", "2026-04-26T03:00:00Z", "2026-04-20T03:00:00Z"},
		},
		{
			name: "a lone backup survives", objs: week[:1], policy: backupstore.Policy{Last: 1},
			keep: []string{"2026-05-05T03:00:00Z"},
		},
		{
			name:   "nothing to do",
			policy: backupstore.Policy{Last: 1},
		},
		{
			name: "equal times: the greater name is the newer", policy: backupstore.Policy{Last: 1},
			objs: []backupstore.Object{at("2026-05-04T03:00:00Z"), {Name: "prod/2026-05-04T03:00:00Zz.tar.age", Created: at("2026-05-04T03:00:00Z").Created}},
			keep: []string{"2026-05-04T03:00:00Zz"},
			drop: []string{"2026-05-04T03:00:00Z"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keep, drop := backupstore.Retain(tc.objs, tc.policy)
			require.Equal(t, orEmpty(tc.keep), names(keep), "keep")
			require.Equal(t, orEmpty(tc.drop), names(drop), "drop")
			require.Len(t, append(keep, drop...), len(tc.objs), "every object is in one list")
		})
	}
}
