package stacks

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/fluodata/talos-pulumi/components/proxmox"
)

// credentialCheck is what checkCredentials found: the credential texts no
// message may show, and the keys whose values are credentials where none
// belongs, so that validation says nothing more about them (it would quote
// them).
type credentialCheck struct {
	secrets []string
	failed  []string
}

// checkCredentials checks every credential of the config on its own: each
// Secret field must be stored encrypted (a plain one is an error naming its key,
// never quoting it), and a plain key must hold no credential-like value
// (docs/decisions/0004-upstream-behaviours.md#which-config-values-are-secret).
func checkCredentials(d *Diagnostics, src Source, cfg *Config) credentialCheck {
	var c credentialCheck
	root := reflect.ValueOf(cfg).Elem()
	for i := range root.NumField() {
		top := jsonName(root.Type().Field(i))
		if top == "" {
			continue
		}
		if f := root.Field(i); f.Kind() == reflect.String && src.isSecret(src.Project+":"+top) {
			c.secrets = append(c.secrets, f.String()) // a plain key set with --secret
		}
		var unchecked []string
		walkSecrets(top, root.Field(i), func(path string, s Secret) {
			if !s.IsSet() {
				return
			}
			c.secrets = append(c.secrets, s.Reveal())
			switch {
			case src.storedPlain(top, path, s.Reveal()):
				d.errorf(path, "is stored in plain text; set it with `pulumi config set --secret --path '%s' <value>`", path)
			case src.PlainInFile == nil:
				unchecked = append(unchecked, path)
			}
		})
		if len(unchecked) > 1 {
			for _, path := range unchecked {
				d.warnf(path, "is not checked for plain text: Pulumi marks only the top-level key %s:%s secret, and the stack file (Pulumi.<stack>.yaml) was not read, so this credential cannot be told apart from the other %d there; make sure it was set with `pulumi config set --secret --path '%s' <value>`",
					src.Project, top, len(unchecked)-1, path)
			}
		}
		walkPlainStrings(top, root.Field(i), func(path, value string) {
			if pw := urlPassword(value); pw != "" {
				// Validation refuses it where it is wrong (proxmox.endpoint)
				// without quoting it; other messages may quote the URL.
				c.secrets = append(c.secrets, pw)
			}
			if isPrivateKey(value) {
				c.secrets = append(c.secrets, value)
				c.failed = append(c.failed, path)
				d.errorf(path, "holds a private key, which this key does not take%s", plainNote(src, top, path, value, "the key"))
			}
		})
	}
	checkTokenID(d, src, cfg, &c)
	return c
}

// checkTokenID refuses an API token id that carries its secret: the form
// `user@realm!name=secret` Proxmox shows once when it creates a token, or
// the whole `PVEAPIToken=user@realm!name=secret` header.
func checkTokenID(d *Diagnostics, src Source, cfg *Config, c *credentialCheck) {
	for _, s := range cfg.ProxmoxSections() {
		checkSectionTokenID(d, src, s, c)
	}
}

// checkSectionTokenID is checkTokenID for one Proxmox section.
func checkSectionTokenID(d *Diagnostics, src Source, s ProxmoxSection, c *credentialCheck) {
	path := s.Path + ".apiTokenId"
	top, _, _ := strings.Cut(s.Path, ".")
	top, _, _ = strings.Cut(top, "[")
	id := s.APITokenID
	first, afterFirst, found := strings.Cut(id, "=")
	if !found {
		return
	}
	c.secrets = append(c.secrets, afterFirst, id[strings.LastIndex(id, "=")+1:])
	c.failed = append(c.failed, path)
	name := first
	if strings.EqualFold(first, "PVEAPIToken") {
		name, _, _ = strings.Cut(afterFirst, "=")
	}
	hint := "user@realm!tokenname"
	if proxmox.IsAPITokenID(name) {
		hint = name
	}
	d.errorf(path, "holds the token secret after '=': keep only the token id (%s) here and set the secret with `pulumi config set --secret --path %s.apiTokenSecret <uuid>`%s",
		hint, s.Path, plainNote(src, top, path, id, "the token"))
}

// plainNote adds, for a credential stored in plain text, that it has been
// exposed.
func plainNote(src Source, top, path, value, what string) string {
	if !src.storedPlain(top, path, value) {
		return ""
	}
	return fmt.Sprintf("; it is stored in plain text in the stack file: replace %s if the file has left this machine", what)
}

// storedPlain reports whether the credential value at path (under the
// top-level key top) is stored in plain text.
func (s Source) storedPlain(top, path, value string) bool {
	if !s.isSecret(s.Project + ":" + top) {
		return true
	}
	plain, ok := s.PlainInFile[path]
	return ok && plain == value
}

// isPrivateKey reports whether s holds private key material (PEM, OpenSSH
// or PuTTY).
func isPrivateKey(s string) bool {
	return strings.Contains(s, "PRIVATE KEY-----") || strings.Contains(s, "PuTTY-User-Key-File-")
}

// urlPassword returns the password in the user info of a URL
// (`https://user:password@host/`), read without a URL parser so that a
// URL too broken to parse gives it up as well.
func urlPassword(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}

// walkPlainStrings calls fn for every plain string field (and string list
// item) under v. Patches and Helm values are text the user hands on to Talos
// and Helm as it is; they are not walked.
func walkPlainStrings(path string, v reflect.Value, fn func(path, value string)) {
	switch {
	case v.Type() == secretType || v.Type() == patchType:
	case v.Kind() == reflect.String:
		if v.String() != "" {
			fn(path, v.String())
		}
	case v.Kind() == reflect.Pointer:
		if !v.IsNil() {
			walkPlainStrings(path, v.Elem(), fn)
		}
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if name := jsonName(v.Type().Field(i)); name != "" {
				walkPlainStrings(join(path, name), v.Field(i), fn)
			}
		}
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			walkPlainStrings(fmt.Sprintf("%s[%d]", path, i), v.Index(i), fn)
		}
	}
}

// followsFrom reports whether a problem at path is about the key at failed
// or a key under it.
func followsFrom(path, failed string) bool {
	rest, ok := strings.CutPrefix(path, failed)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// dropFollowUps removes, from the problems found from errorsFrom and
// warningsFrom on, those about a key whose value could not be decoded or was
// refused as a misplaced credential, or about a key under it: after "must
// be a whole number", "is required" says nothing new, and a patch that
// failed to decode gets no second message about what it was read as.
func dropFollowUps(d *Diagnostics, errorsFrom, warningsFrom int, failed []string) {
	if len(failed) == 0 {
		return
	}
	keep := func(p Problem) bool {
		for _, f := range failed {
			if followsFrom(p.Path, f) {
				return false
			}
		}
		return true
	}
	filter := func(ps []Problem, from int) []Problem {
		out := ps[:from]
		for _, p := range ps[from:] {
			if keep(p) {
				out = append(out, p)
			}
		}
		return out
	}
	d.Errors = filter(d.Errors, errorsFrom)
	d.Warnings = filter(d.Warnings, warningsFrom)
}

// problemPaths lists the paths of ps.
func problemPaths(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Path
	}
	return out
}
