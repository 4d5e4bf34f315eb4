package pveapitest

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The access API's objects the program makes for the Proxmox CSI plugin,
// as pve-access-control keeps them: roles with privileges, users, API
// tokens, and ACL entries (path, role, user). Deleting a user drops its
// tokens and its ACL entries, deleting a role drops its ACL entries, and
// destroying a VM drops the entries on its path (DeleteVM).
type access struct {
	roles map[string][]string
	users map[string]bool
	// comments are the users' comments, which Proxmox keeps and returns.
	comments map[string]string
	tokens   map[string]bool // "user!name"
	// tokenInfo is what Proxmox keeps of each token and its read
	// returns: comment, expire (0: never), privsep.
	tokenInfo map[string]map[string]any
	acls      map[ACL]bool
}

// ACL is one ACL entry.
type ACL struct {
	Path, Role, User string
	Propagate        bool
}

var (
	rolesRe = regexp.MustCompile(`^/api2/json/access/roles(?:/([^/]+))?$`)
	usersRe = regexp.MustCompile(`^/api2/json/access/users(?:/([^/]+))?$`)
	tokenRe = regexp.MustCompile(`^/api2/json/access/users/([^/]+)/token/([^/]+)$`)
)

// handleAccess answers the access calls; false if the request is none of
// them.
func (s *Server) handleAccess(w http.ResponseWriter, r *http.Request) bool {
	if s.roles == nil {
		s.access = access{roles: map[string][]string{}, users: map[string]bool{}, comments: map[string]string{}, tokens: map[string]bool{}, tokenInfo: map[string]map[string]any{}, acls: map[ACL]bool{}}
	}
	path, _ := url.PathUnescape(r.URL.Path)
	switch {
	case path == "/api2/json/access/acl" && r.Method == http.MethodPut:
		s.putACL(w, r)
	case path == "/api2/json/access/acl" && r.Method == http.MethodGet:
		// Proxmox's ACL list (GET /access/acl): every entry, a user's
		// with type "user" and its id as ugid.
		out := []map[string]any{}
		for _, a := range slices.SortedFunc(maps.Keys(s.acls), func(a, b ACL) int { return strings.Compare(a.Path+a.Role+a.User, b.Path+b.Role+b.User) }) {
			out = append(out, map[string]any{"path": a.Path, "roleid": a.Role, "type": "user", "ugid": a.User, "propagate": map[bool]int{true: 1}[a.Propagate]})
		}
		writeData(w, out)
	case tokenRe.MatchString(path):
		m := tokenRe.FindStringSubmatch(path)
		s.token(w, r, m[1], m[2])
	case rolesRe.MatchString(path):
		s.role(w, r, rolesRe.FindStringSubmatch(path)[1])
	case usersRe.MatchString(path):
		s.user(w, r, usersRe.FindStringSubmatch(path)[1])
	default:
		return false
	}
	return true
}

func (s *Server) role(w http.ResponseWriter, r *http.Request, id string) {
	switch {
	case r.Method == http.MethodPost && id == "":
		id = r.Form.Get("roleid")
		if _, ok := s.roles[id]; ok {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("role '%s' already exists", id))
			return
		}
		s.roles[id] = splitList(r.Form.Get("privs"))
		writeData(w, nil)
	case r.Method == http.MethodGet && id != "":
		privs, ok := s.roles[id]
		if !ok {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("role '%s' does not exist", id))
			return
		}
		out := map[string]int{}
		for _, p := range privs {
			out[p] = 1
		}
		writeData(w, out)
	case r.Method == http.MethodDelete && id != "":
		if _, ok := s.roles[id]; !ok {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("role '%s' does not exist", id))
			return
		}
		delete(s.roles, id)
		maps.DeleteFunc(s.acls, func(a ACL, _ bool) bool { return a.Role == id })
		writeData(w, nil)
	default:
		writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
	}
}

func (s *Server) user(w http.ResponseWriter, r *http.Request, id string) {
	switch {
	case r.Method == http.MethodPost && id == "":
		id = r.Form.Get("userid")
		if s.users[id] {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("create user failed: user '%s' already exists", id))
			return
		}
		s.users[id] = true
		s.comments[id] = r.Form.Get("comment")
		writeData(w, nil)
	case r.Method == http.MethodGet && id != "":
		// GET /access/users/{userid}: the fields Proxmox returns of a
		// user the fake keeps (enabled, never expiring).
		if !s.users[id] {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("no such user ('%s')", id))
			return
		}
		out := map[string]any{"enable": 1, "expire": 0}
		if c := s.comments[id]; c != "" {
			out["comment"] = c
		}
		writeData(w, out)
	case r.Method == http.MethodPut && id != "":
		// PUT /access/users/{userid} (comment, email, enable, ...): the
		// fake keeps the comment.
		if !s.users[id] {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("update user failed: user '%s' does not exist", id))
			return
		}
		if r.Form.Has("comment") {
			s.comments[id] = r.Form.Get("comment")
		}
		writeData(w, nil)
	case r.Method == http.MethodDelete && id != "":
		if !s.users[id] {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("delete user failed: user '%s' does not exist", id))
			return
		}
		delete(s.users, id)
		delete(s.comments, id)
		maps.DeleteFunc(s.tokens, func(t string, _ bool) bool { return strings.HasPrefix(t, id+"!") })
		maps.DeleteFunc(s.tokenInfo, func(t string, _ map[string]any) bool { return strings.HasPrefix(t, id+"!") })
		maps.DeleteFunc(s.acls, func(a ACL, _ bool) bool { return a.User == id })
		writeData(w, nil)
	default:
		writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
	}
}

func (s *Server) token(w http.ResponseWriter, r *http.Request, user, name string) {
	full := user + "!" + name
	switch r.Method {
	case http.MethodPost:
		if !s.users[user] {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("no such user ('%s')", user))
			return
		}
		if s.tokens[full] {
			writeErr(w, http.StatusInternalServerError, "Token already exists.")
			return
		}
		s.tokens[full] = true
		// As pve-access-control's generate_token: privsep defaults to
		// 1, expire to 0 (never); a comment is kept when given.
		info := map[string]any{"privsep": 1, "expire": 0}
		s.setTokenInfo(info, r.Form)
		s.tokenInfo[full] = info
		writeData(w, map[string]any{"full-tokenid": full, "value": "5e4b3c2a-1f0e-4d9c-8b7a-" + strconv.Itoa(len(s.tokens)), "info": info})
	case http.MethodGet, http.MethodPut:
		// read_token returns what the token keeps; update_token_info
		// changes what it is given and returns the result.
		if !s.tokens[full] {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("no such token '%s' for user '%s'", name, user))
			return
		}
		if r.Method == http.MethodPut {
			s.setTokenInfo(s.tokenInfo[full], r.Form)
		}
		writeData(w, s.tokenInfo[full])
	case http.MethodDelete:
		if !s.tokens[full] {
			writeErr(w, http.StatusInternalServerError, "no such token")
			return
		}
		delete(s.tokens, full)
		delete(s.tokenInfo, full)
		writeData(w, nil)
	default:
		writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
	}
}

// setTokenInfo sets a token's comment, expire and privsep from a request's
// form, those it has.
func (s *Server) setTokenInfo(info map[string]any, form url.Values) {
	if form.Has("comment") {
		info["comment"] = form.Get("comment")
	}
	for _, key := range []string{"privsep", "expire"} {
		if n, err := strconv.Atoi(form.Get(key)); err == nil {
			info[key] = n
		}
	}
}

// putACL is PUT /access/acl: add (or, with delete=1, remove) the entries
// of path for each role and user given.
func (s *Server) putACL(w http.ResponseWriter, r *http.Request) {
	path := r.Form.Get("path")
	del := r.Form.Get("delete") == "1"
	propagate := r.Form.Get("propagate") != "0"
	for _, role := range splitList(r.Form.Get("roles")) {
		if _, ok := s.roles[role]; !ok && !del {
			writeErr(w, http.StatusInternalServerError, fmt.Sprintf("role '%s' does not exist", role))
			return
		}
		for _, user := range splitList(r.Form.Get("users")) {
			if !s.users[user] && !del {
				writeErr(w, http.StatusInternalServerError, fmt.Sprintf("user '%s' does not exist", user))
				return
			}
			if del {
				maps.DeleteFunc(s.acls, func(a ACL, _ bool) bool { return a.Path == path && a.Role == role && a.User == user })
			} else {
				s.acls[ACL{Path: path, Role: role, User: user, Propagate: propagate}] = true
			}
		}
	}
	writeData(w, nil)
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

// DeleteVM destroys a VM as Proxmox does, without a task (see destroyVM):
// with it go the ACL entries on its path.
func (s *Server) DeleteVM(vmid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.vms, vmid)
	path := "/vms/" + strconv.Itoa(vmid)
	maps.DeleteFunc(s.acls, func(a ACL, _ bool) bool { return a.Path == path })
}

// Access is the access API's state: the roles with their privileges, the
// users, the tokens ("user!name") and the ACL entries, sorted.
func (s *Server) Access() (roles map[string][]string, users, tokens []string, acls []ACL) {
	s.mu.Lock()
	defer s.mu.Unlock()
	roles = map[string][]string{}
	for k, v := range s.roles {
		roles[k] = slices.Clone(v)
	}
	users = slices.Sorted(maps.Keys(s.users))
	tokens = slices.Sorted(maps.Keys(s.tokens))
	acls = slices.SortedFunc(maps.Keys(s.acls), func(a, b ACL) int { return strings.Compare(a.Path+a.Role+a.User, b.Path+b.Role+b.User) })
	return roles, users, tokens, acls
}
