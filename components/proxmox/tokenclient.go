package proxmox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/pveapi"
)

// tokenClient is the fast-stop hook's Proxmox client when the caller gave
// none: the token is a Pulumi input (a secret, possibly not yet resolved
// when the component is built), so the client is made once the value is
// there. The hook runs at a VM's delete, after the program has registered
// everything, when the value has long resolved; a hook that runs before
// waits for it.
type tokenClient struct {
	ready chan struct{}
	once  sync.Once
	api   *pveapi.Client
	err   error
}

var _ API = (*tokenClient)(nil)

func newTokenClient(endpoint, tokenID string, insecure bool, secret pulumi.StringInput) *tokenClient {
	t := &tokenClient{ready: make(chan struct{})}
	if secret == nil {
		t.set(nil, fmt.Errorf("unable to build the Proxmox client: proxmox.apiTokenSecret is not set"))
		return t
	}
	secret.ToStringOutput().ApplyT(func(s string) string {
		api, err := pveapi.New(endpoint, tokenID, s, pveapi.Options{Insecure: insecure})
		if err != nil {
			err = fmt.Errorf("unable to build the Proxmox client: %w", err)
		}
		t.set(api, err)
		return ""
	})
	return t
}

func (t *tokenClient) set(api *pveapi.Client, err error) {
	t.once.Do(func() {
		t.api, t.err = api, err
		close(t.ready)
	})
}

func (t *tokenClient) client(ctx context.Context) (*pveapi.Client, error) {
	select {
	case <-t.ready:
		return t.api, t.err
	case <-ctx.Done():
		return nil, fmt.Errorf("unable to build the Proxmox client: the API token never resolved: %w", ctx.Err())
	}
}

func (t *tokenClient) VMStatus(ctx context.Context, node string, vmid int) (pveapi.VMStatus, error) {
	api, err := t.client(ctx)
	if err != nil {
		return pveapi.VMStatus{}, err
	}
	return api.VMStatus(ctx, node, vmid)
}

func (t *tokenClient) StopVM(ctx context.Context, node string, vmid int) (string, error) {
	api, err := t.client(ctx)
	if err != nil {
		return "", err
	}
	return api.StopVM(ctx, node, vmid)
}

func (t *tokenClient) WaitTask(ctx context.Context, node, upid string, poll time.Duration) error {
	api, err := t.client(ctx)
	if err != nil {
		return err
	}
	return api.WaitTask(ctx, node, upid, poll)
}

func (t *tokenClient) EjectCDROM(ctx context.Context, node string, vmid int, iface string) error {
	api, err := t.client(ctx)
	if err != nil {
		return err
	}
	return api.EjectCDROM(ctx, node, vmid, iface)
}
