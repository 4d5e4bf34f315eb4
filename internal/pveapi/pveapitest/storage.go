package pveapitest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Datastore is a directory datastore of the fake, like Proxmox's "local".
type Datastore struct {
	Path    string   // e.g. /var/lib/vz; ISOs live in <Path>/template/iso
	Content []string // content types it allows: iso, vztmpl, ...
}

// storage is the fake's file state: what every node's datastores hold and
// what the nodes can download.
type storage struct {
	datastores map[string]Datastore
	files      map[string]map[string]int64 // node -> volid -> size
	remote     map[string]int64            // URL -> size
	downloads  map[string]int              // node -> download-url tasks started
}

func newStorage() storage {
	return storage{
		datastores: map[string]Datastore{"local": {Path: "/var/lib/vz", Content: []string{"iso", "vztmpl", "backup"}}},
		files:      map[string]map[string]int64{},
		remote:     map[string]int64{},
		downloads:  map[string]int{},
	}
}

// AddDatastore adds a datastore to every node, e.g. a ZFS pool that holds
// "images" (VM disks, named vm-<vmid>-<name>).
func (s *Server) AddDatastore(name string, ds Datastore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.datastores[name] = ds
}

// Serve makes a URL downloadable by the nodes, with its size.
func (s *Server) Serve(rawURL string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remote[rawURL] = size
}

// PutFile puts a file into a node's datastore, as someone outside the
// provider would (by hand, or a stack that kept it).
func (s *Server) PutFile(node, volid string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(node, volid, size)
}

func (s *Server) put(node, volid string, size int64) {
	if s.files[node] == nil {
		s.files[node] = map[string]int64{}
	}
	s.files[node][volid] = size
}

// Volumes lists the volume ids in a node's datastores, sorted.
func (s *Server) Volumes(node string) []string {
	defer s.lockSettled()()
	var out []string
	for v := range s.files[node] {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// Downloads reports how many download tasks a node started.
func (s *Server) Downloads(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads[node]
}

var (
	urlMetaRe     = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/query-url-metadata$`)
	downloadURLRe = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/storage/([^/]+)/download-url$`)
	contentRe     = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/storage/([^/]+)/content$`)
	volumeRe      = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/storage/([^/]+)/content/(.+)$`)

	// httpURLRe is download_url's pattern for url.
	httpURLRe = regexp.MustCompile(`^https?://.*`)
	// isoExtRe is pve-storage's $ISO_EXT_RE_0 as download_url applies it.
	isoExtRe = regexp.MustCompile(`(?i)^[^/]+\.(?:iso|img)$`)
	// isoVolnameRe is how the directory plugin parses an ISO's volume name.
	isoVolnameRe = regexp.MustCompile(`(?i)^iso/([^/]+\.(?:iso|img))$`)
	// imageVolnameRe is a VM disk's name on a pool datastore (the ZFS and
	// LVM plugins): vm-<owner vmid>-<name>.
	imageVolnameRe = regexp.MustCompile(`^vm-(\d+)-[A-Za-z0-9_.-]+$`)
	// volidRe is pve-storage's parse_volume_id.
	volidRe = regexp.MustCompile(`^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$`)
	// unsafeRe is what normalize_content_filename replaces with '_'.
	unsafeRe = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)
)

// downloadParams are download_url's parameters; node and storage come from
// the path and may be repeated in the body (bpg's client sends them).
var downloadParams = []string{"node", "storage", "url", "content", "filename", "checksum", "compression", "checksum-algorithm", "verify-certificates"}

// handleStorage answers the storage calls of bpg's download_file resource;
// false if the request is none of them.
func (s *Server) handleStorage(w http.ResponseWriter, r *http.Request) bool {
	if m := match(r, http.MethodGet, urlMetaRe); m != nil {
		s.urlMetadata(w, r)
		return true
	}
	if m := match(r, http.MethodPost, downloadURLRe); m != nil {
		s.downloadURL(w, r, m[1], m[2])
		return true
	}
	if m := match(r, http.MethodGet, contentRe); m != nil {
		s.listContent(w, r, m[1], m[2])
		return true
	}
	if m := match(r, http.MethodDelete, volumeRe); m != nil {
		s.deleteVolume(w, m[1], m[2], m[3])
		return true
	}
	if m := match(r, http.MethodGet, volumeRe); m != nil {
		s.volumeInfo(w, m[1], m[2], m[3])
		return true
	}
	return false
}

// volumeInfo is pve-storage's content info (GET .../content/{volume}): the
// volume's path, format and size. A VM disk of a datastore without a path
// is an LVM volume (/dev/<vg>/<name>, raw).
func (s *Server) volumeInfo(w http.ResponseWriter, node, store, volume string) {
	volid := volume
	if !strings.Contains(volume, ":") {
		volid = store + ":" + volume
	}
	ds, ok := s.datastores[store]
	if !ok {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("storage '%s' does not exist", store))
		return
	}
	size, ok := s.files[node][volid]
	if !ok {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("volume '%s' does not exist", volid))
		return
	}
	_, volname, _ := strings.Cut(volid, ":")
	info := map[string]any{"size": size, "used": size, "format": "raw"}
	switch m := imageVolnameRe.FindStringSubmatch(volname); {
	case isoVolnameRe.MatchString(volname):
		info["format"], info["path"] = "iso", ds.Path+"/template/"+volname
	case m != nil && ds.Path == "":
		info["path"] = "/dev/pve/" + volname
	case m != nil:
		info["path"] = ds.Path + "/images/" + m[1] + "/" + volname
	}
	writeData(w, info)
}

func match(r *http.Request, method string, re *regexp.Regexp) []string {
	if r.Method != method {
		return nil
	}
	return re.FindStringSubmatch(r.URL.Path)
}

// urlMetadata is pve-manager's query-url-metadata: the node asks the URL
// for its name, type and size.
func (s *Server) urlMetadata(w http.ResponseWriter, r *http.Request) {
	u := r.Form.Get("url")
	if parsed, err := url.Parse(u); err == nil && slices.Contains(s.Unreachable, parsed.Hostname()) {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("Can't connect to %s:443 (Connection timed out)", parsed.Hostname()))
		return
	}
	size, ok := s.remoteSize(u)
	if !ok {
		writeErr(w, http.StatusInternalServerError, "invalid server response: '404 Not Found'")
		return
	}
	writeData(w, map[string]any{"filename": path.Base(u), "mimetype": "application/x-iso9660-image", "size": size})
}

// remoteSize is the size of a URL the nodes can fetch: one registered with
// Serve, or, with Web set, one that answers a HEAD request with 200.
func (s *Server) remoteSize(u string) (int64, bool) {
	if size, ok := s.remote[u]; ok {
		return size, true
	}
	if s.Web == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return 0, false
	}
	resp, err := s.Web.Do(req)
	if err != nil {
		return 0, false
	}
	_ = resp.Body.Close()
	return resp.ContentLength, resp.StatusCode == http.StatusOK
}

// downloadURL is pve-storage's download_url (src/PVE/API2/Storage/Status.pm):
// the parameter checks, then a "download" task that, like pve-common's
// download_file_from_url without a checksum, refuses to replace an existing
// file. The file appears when the task ends.
func (s *Server) downloadURL(w http.ResponseWriter, r *http.Request, node, store string) {
	form := r.PostForm
	if errs := unknownParams(form, downloadParams); len(errs) > 0 {
		writeParamErr(w, errs)
		return
	}
	errs := map[string]string{}
	for _, k := range []string{"url", "content", "filename"} {
		if form.Get(k) == "" {
			errs[k] = "property is missing and it is not optional"
		}
	}
	if u := form.Get("url"); u != "" && !httpURLRe.MatchString(u) {
		errs["url"] = "value does not match the regex pattern"
	}
	if c := form.Get("content"); c != "" && !slices.Contains([]string{"iso", "vztmpl", "import"}, c) {
		errs["content"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'iso, vztmpl, import'", c)
	}
	if len(form.Get("filename")) > 255 {
		errs["filename"] = "value may only be 255 characters long"
	}
	if len(errs) > 0 {
		writeParamErr(w, errs)
		return
	}
	ds, ok := s.datastores[store]
	if !ok {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("storage '%s' does not exist", store))
		return
	}
	content := form.Get("content")
	if !slices.Contains(ds.Content, content) {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("storage '%s' is not configured for content-type '%s'", store, content))
		return
	}
	if content != "iso" {
		writeErr(w, http.StatusNotImplemented, "the fake downloads ISOs only")
		return
	}
	// Proxmox stores the file under the normalized name, whatever the
	// caller thinks it is called.
	name := normalizeContentFilename(form.Get("filename"))
	if !isoExtRe.MatchString(name) {
		writeParamErr(w, map[string]string{"filename": "wrong file extension"})
		return
	}
	dest := ds.Path + "/template/iso/" + name
	volid := store + ":iso/" + name
	t := &task{done: time.Now().Add(s.TaskLatency)}
	size, served := s.remoteSize(form.Get("url"))
	switch _, exists := s.files[node][volid]; {
	case exists:
		t.failMsg = fmt.Sprintf("refusing to override existing file '%s'", dest)
	case !served:
		t.failMsg = "download failed: command 'wget --progress=dot:giga -O " + dest + ".tmp_dwnl.1 " + form.Get("url") + "' failed: exit code 8"
	default:
		t.apply = func() { s.put(node, volid, size) }
	}
	s.downloads[node]++
	writeData(w, s.newTask(node, "download", name, t))
}

// normalizeContentFilename is pve-storage's normalize_content_filename.
func normalizeContentFilename(name string) string {
	name = strings.TrimSuffix(name, "\n")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return unsafeRe.ReplaceAllString(name, "_")
}

// listContent is pve-storage's content index, filtered by ?content=.
func (s *Server) listContent(w http.ResponseWriter, r *http.Request, node, store string) {
	if _, ok := s.datastores[store]; !ok {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("storage '%s' does not exist", store))
		return
	}
	want := r.Form.Get("content")
	out := []map[string]any{}
	for volid, size := range s.files[node] {
		sid, volname, _ := strings.Cut(volid, ":")
		ct, _, _ := strings.Cut(volname, "/")
		entry := map[string]any{"volid": volid, "content": ct, "format": ct, "size": size}
		if m := imageVolnameRe.FindStringSubmatch(volname); m != nil {
			// A VM disk of a pool datastore (ZFS, LVM): its name says its
			// owner.
			ct = "images"
			vmid, _ := strconv.Atoi(m[1])
			entry = map[string]any{"volid": volid, "content": ct, "format": "raw", "size": size, "vmid": vmid}
		}
		if sid != store || (want != "" && ct != want) {
			continue
		}
		out = append(out, entry)
	}
	writeData(w, out)
}

// deleteVolume is pve-storage's content delete
// (src/PVE/API2/Storage/Content.pm): the volume may be given with or without
// its storage; the removal is an "imgdel" task, and a file that is not there
// is a warning in that task, not an error. The fake removes the file at
// once: on a directory datastore the task is an unlink, done long before any
// next call arrives.
func (s *Server) deleteVolume(w http.ResponseWriter, node, store, volume string) {
	volid := store + ":" + volume
	if strings.Contains(volume, ":") {
		m := volidRe.FindStringSubmatch(volume)
		if m == nil {
			writeParamErr(w, map[string]string{"volume": fmt.Sprintf("unable to parse volume ID '%s'", volume)})
			return
		}
		if m[1] != store {
			writeParamErr(w, map[string]string{"volume": fmt.Sprintf("storage ID mismatch (%s != %s)", m[1], store)})
			return
		}
		volid = volume
	}
	if _, ok := s.datastores[store]; !ok {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("storage '%s' does not exist", store))
		return
	}
	_, volname, _ := strings.Cut(volid, ":")
	if !isoVolnameRe.MatchString(volname) && !imageVolnameRe.MatchString(volname) {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("unable to parse directory volume name '%s'", volname))
		return
	}
	t := &task{}
	if _, ok := s.files[node][volid]; ok {
		delete(s.files[node], volid)
	} else {
		t.exit = "WARNINGS: 1"
	}
	writeData(w, s.newTask(node, "imgdel", store, t))
}
