package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
)

// downloadFile is a model of what the proxmoxve provider's download.File
// (bpg/terraform-provider-proxmox v0.95.0, the proxmox_virtual_environment_
// download_file resource) asks of the Proxmox API on create and delete, as
// its source does it:
//
//   - fwprovider/nodes/resource_download_file.go, Create: query the URL's
//     metadata (getURLMetadata), POST download-url and wait for the task
//     (proxmox/nodes/storage/download_url.go, DownloadFileByURL: a failed
//     task is deleted and its exit status becomes the error). If the error
//     says "refusing to override existing file" (isErrFileAlreadyExists) and
//     overwrite_unmanaged is set, delete the volume "<content>/<file name>"
//     (proxmox/nodes/storage/content.go, DeleteDatastoreFile, which does not
//     wait for Proxmox's delete task) and download once more; otherwise fail
//     with "File already exists in the datastore ...". Then the id is
//     "<datastore>:<content>/<file name>" and read lists the datastore's
//     content and fails unless that volume id is there.
//   - Delete: DeleteDatastoreFile of the id from state; "does not exist" is
//     success.
//
// Left out: the provider's retries of transient errors, its plan-time size
// checks (they need overwrite=true, which the program does not set) and the
// version lookup that only decorates a download error.
type downloadFile struct {
	fake *pveapitest.Server
}

// downloadInputs are a registered download.File's inputs, with the
// provider's defaults for what the program leaves unset.
type downloadInputs struct {
	Node, Datastore, Content, FileName, URL string
	OverwriteUnmanaged                      bool
	UploadTimeout                           time.Duration
	RetainOnDelete                          bool
}

func inputsOf(r componentstest.Registered) downloadInputs {
	str := func(k resource.PropertyKey) string {
		if v, ok := r.Inputs[k]; ok && v.IsString() {
			return v.StringValue()
		}
		return ""
	}
	in := downloadInputs{
		Node: str("nodeName"), Datastore: str("datastoreId"), Content: str("contentType"),
		FileName: str("fileName"), URL: str("url"), UploadTimeout: 600 * time.Second, // the schema's default
		RetainOnDelete: r.RetainOnDelete,
	}
	if v, ok := r.Inputs["overwriteUnmanaged"]; ok && v.IsBool() {
		in.OverwriteUnmanaged = v.BoolValue()
	}
	if v, ok := r.Inputs["uploadTimeout"]; ok && v.IsNumber() {
		in.UploadTimeout = time.Duration(v.NumberValue()) * time.Second
	}
	return in
}

// errFileAlreadyExists is the provider's diagnostic for a file in the way
// (its summary, starting "File already exists").
var errFileAlreadyExists = errors.New("file already exists in the datastore, it was created outside of Terraform or is managed by another resource")

// Create returns the resource's id, as the provider would record it.
func (d downloadFile) Create(in downloadInputs) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), in.UploadTimeout)
	defer cancel()
	q := url.Values{"url": {in.URL}, "verify-certificates": {"1"}}
	if err := d.do(ctx, http.MethodGet, "/nodes/"+in.Node+"/query-url-metadata?"+q.Encode(), nil, nil); err != nil {
		return "", fmt.Errorf("could not get file metadata, unexpected error: %w", err)
	}
	storage := "/nodes/" + url.PathEscape(in.Node) + "/storage/" + url.PathEscape(in.Datastore)
	download := func() error {
		form := url.Values{
			"content": {in.Content}, "filename": {in.FileName}, "node": {in.Node},
			"storage": {in.Datastore}, "url": {in.URL}, "verify-certificates": {"1"},
		}
		var upid string
		if err := d.do(ctx, http.MethodPost, storage+"/download-url", form, &upid); err != nil {
			return fmt.Errorf("error download file by URL: %w", err)
		}
		if err := d.waitTask(ctx, in.Node, upid); err != nil {
			err = fmt.Errorf("error download file to datastore %s: failed waiting for url download: %w", in.Datastore, err)
			if delErr := d.do(ctx, http.MethodDelete, "/nodes/"+in.Node+"/tasks/"+url.PathEscape(upid), nil, nil); delErr != nil {
				return fmt.Errorf("%w \n %w", err, delErr)
			}
			return err
		}
		return nil
	}
	err := download()
	if isErrFileAlreadyExists(err) && in.OverwriteUnmanaged {
		fileID := in.Content + "/" + in.FileName
		var delErr error
		if e := d.do(ctx, http.MethodDelete, storage+"/content/"+url.PathEscape(fileID), nil, nil); e != nil && !strings.Contains(e.Error(), "does not exist") {
			// The provider records this as a diagnostic (so the create
			// fails) and still downloads again.
			delErr = fmt.Errorf("could not delete file '%s', unexpected error: %w", fileID, e)
		}
		err = download()
		if delErr != nil {
			err = errors.Join(delErr, err)
		}
	}
	if err != nil {
		if isErrFileAlreadyExists(err) {
			return "", fmt.Errorf("%w: '%s', error: %w", errFileAlreadyExists, in.FileName, err)
		}
		return "", fmt.Errorf("could not download file '%s', unexpected error: %w", in.FileName, err)
	}
	id := in.Datastore + ":" + in.Content + "/" + in.FileName
	return id, d.read(ctx, in, id)
}

// read is the provider's read: the volume must be in the content list.
func (d downloadFile) read(ctx context.Context, in downloadInputs, id string) error {
	var files []struct {
		VolID string `json:"volid"`
	}
	path := "/nodes/" + url.PathEscape(in.Node) + "/storage/" + url.PathEscape(in.Datastore) + "/content?content=" + url.QueryEscape(in.Content)
	if err := d.do(ctx, http.MethodGet, path, nil, &files); err != nil {
		return fmt.Errorf("unexpected error when listing datastore files: %w", err)
	}
	for _, f := range files {
		if f.VolID == id {
			return nil
		}
	}
	return errors.New("file does not exists in datastore")
}

// Delete is the provider's delete of the id in state.
func (d downloadFile) Delete(in downloadInputs, id string) error {
	path := "/nodes/" + url.PathEscape(in.Node) + "/storage/" + url.PathEscape(in.Datastore) + "/content/" + url.PathEscape(id)
	err := d.do(context.Background(), http.MethodDelete, path, nil, nil)
	if err != nil && !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("could not delete datastore file '%s', unexpected error: %w", id, err)
	}
	return nil
}

func isErrFileAlreadyExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "refusing to override existing file")
}

func (d downloadFile) waitTask(ctx context.Context, node, upid string) error {
	for {
		var st struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		}
		if err := d.do(ctx, http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil, &st); err != nil {
			return err
		}
		if st.Status != "running" {
			if st.ExitStatus != "OK" {
				return fmt.Errorf("task %q failed to complete with exit code: %s", upid, st.ExitStatus)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timeout while waiting for task %q to complete", upid)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// do is one API call: a form body for a POST, the "data" member into out.
func (d downloadFile) do(ctx context.Context, method, path string, form url.Values, out any) error {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, d.fake.URL+"/api2/json"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "PVEAPIToken="+pveapitest.TokenID+"="+pveapitest.TokenSecret)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := d.fake.Client().Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var envelope struct {
		Data    json.RawMessage   `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&envelope); err != nil {
		return fmt.Errorf("%s %s: %d, answer is not JSON: %w", method, path, resp.StatusCode, err)
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("received an HTTP %d response - Reason: %s %v", resp.StatusCode, strings.TrimSpace(envelope.Message), envelope.Errors)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(envelope.Data, out)
}
