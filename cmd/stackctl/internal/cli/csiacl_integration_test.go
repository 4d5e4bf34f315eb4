//go:build integration

package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/permission"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/clitest"
)

// TestIntegrationTheCSIGrantsSurviveARefreshWithTheRealProvider runs the
// CSI plugin's role, user and ACL, registered as components/proxmox
// registers them (the user ignoring its CSIUserACLs), with the real
// proxmoxve plugin 7.13 (bpg v0.95) against the project's Proxmox API fake
// (issue 35, item C.9): up, refresh, then a preview shows no change and an
// up keeps the grant. Registered without the ignore, as before, the up
// after the refresh revokes it: bpg's user read puts the Acl resource's
// entry into the user's acl, and its update deletes that set. Skipped,
// saying so, without pulumi on PATH.
func TestIntegrationTheCSIGrantsSurviveARefreshWithTheRealProvider(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := clitest.Backend(t, "the refresh cycle was not run with the real provider")
	pve := pveapitest.New(t, map[int]*pveapitest.VM{})

	program := func(ignore bool) pulumi.RunFunc {
		return func(ctx *pulumi.Context) error {
			prov, err := proxmoxve.NewProvider(ctx, "pve", &proxmoxve.ProviderArgs{
				Endpoint: pulumi.String(pve.URL + "/"), ApiToken: pulumi.String(pveapitest.TokenID + "=" + pveapitest.TokenSecret), Insecure: pulumi.Bool(true),
			})
			if err != nil {
				return err
			}
			opts := []pulumi.ResourceOption{pulumi.Provider(prov)}
			role, err := permission.NewRole(ctx, "csi-role", &permission.RoleArgs{
				RoleId: pulumi.String(ctx.Stack() + "-csi"), Privileges: pulumi.ToStringArray(proxmox.CSIPrivileges),
			}, opts...)
			if err != nil {
				return err
			}
			userOpts := opts
			if ignore {
				userOpts = append(userOpts, pulumi.IgnoreChanges([]string{proxmox.CSIUserACLs}))
			}
			u, err := permission.NewUser(ctx, "csi-user", &permission.UserArgs{
				UserId: pulumi.String(ctx.Stack() + "-csi@pve"), Comment: pulumi.String("Proxmox CSI plugin"),
			}, userOpts...)
			if err != nil {
				return err
			}
			_, err = proxmoxve.NewAcl(ctx, "csi-acl", &proxmoxve.AclArgs{
				Path: pulumi.String("/storage/local-zfs"), RoleId: role.RoleId, UserId: u.UserId, Propagate: pulumi.Bool(false),
			}, opts...)
			return err
		}
	}
	granted := func(user string) bool {
		_, _, _, acls := pve.Access()
		for _, a := range acls {
			if a.User == user && a.Path == "/storage/local-zfs" {
				return true
			}
		}
		return false
	}

	for _, tc := range []struct {
		stack  string
		ignore bool
	}{{"fixed", true}, {"before", false}} {
		work := filepath.Join(dir, tc.stack)
		require.NoError(t, os.MkdirAll(work, 0o700))
		s, err := auto.UpsertStackInlineSource(ctx, tc.stack, "csi-acl-it", program(tc.ignore), auto.WorkDir(work))
		require.NoError(t, err)
		_, err = s.Up(ctx)
		require.NoError(t, err, tc.stack)
		user := tc.stack + "-csi@pve"
		require.True(t, granted(user), "%s: the first up grants the datastore", tc.stack)
		_, err = s.Refresh(ctx)
		require.NoError(t, err, tc.stack)
		if tc.ignore {
			pre, err := s.Preview(ctx, optpreview.ExpectNoChanges())
			require.NoError(t, err, "a preview after a refresh shows no change")
			assert.Zero(t, pre.ChangeSummary[apitype.OpUpdate]+pre.ChangeSummary[apitype.OpReplace]+pre.ChangeSummary[apitype.OpCreate])
		}
		_, err = s.Up(ctx)
		require.NoError(t, err, tc.stack)
		assert.Equal(t, tc.ignore, granted(user), "%s: the grant after refresh and up (ignoring the user's acls: %v)", tc.stack, tc.ignore)
	}
}
