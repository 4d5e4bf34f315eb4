package talos

import (
	"fmt"
	"strconv"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// HookEnv reads the environment input (a command's) of the resource a hook
// runs for, secrets unwrapped: the values the resource was given are what
// the hook acts on, so that a resource and its hook never disagree.
func HookEnv(inputs resource.PropertyMap) map[string]string {
	env := map[string]string{}
	v := PlainValue(inputs["environment"])
	if !v.IsObject() {
		return env
	}
	for k, e := range v.ObjectValue() {
		if e = PlainValue(e); e.IsString() {
			env[string(k)] = e.StringValue()
		}
	}
	return env
}

// PlainValue is v with its secret wrappers taken off: what a hook reads of
// a resource's inputs or outputs.
func PlainValue(v resource.PropertyValue) resource.PropertyValue {
	for v.IsSecret() {
		v = v.SecretValue().Element
	}
	return v
}

// EnvSeconds reads a duration in whole seconds from env[key]: def when it
// is missing, an error naming the key when it is not a positive number.
func EnvSeconds(env map[string]string, key string, def time.Duration) (time.Duration, error) {
	s, ok := env[key]
	if !ok || s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("unable to read %s: %q is not a positive number of seconds", key, s)
	}
	return time.Duration(n) * time.Second, nil
}

// Logger is what a hook says while it runs.
type Logger interface {
	// Status shows a message on the resource's line while the hook runs.
	Status(msg string)
	// Info keeps a message among the resource's diagnostics.
	Info(msg string)
}

// HookLog logs on the resource a hook runs for. Its own URN output
// resolves only once its step is done, which waits for the hook, so the
// message names the resource by the URN the hook was given.
type HookLog struct {
	ctx *pulumi.Context
	res pulumi.Resource
}

// NewHookLog returns the log of the hook run for urn.
func NewHookLog(ctx *pulumi.Context, urn pulumi.URN) Logger {
	return HookLog{ctx: ctx, res: &urnResource{urn: urn.ToURNOutput()}}
}

// Status shows msg on the resource's line while the hook runs (an
// ephemeral message: the waits' reports every 30 s, which would flood the
// run's final diagnostics).
func (l HookLog) Status(msg string) {
	_ = l.ctx.Log.Info(msg, &pulumi.LogArgs{Resource: l.res, Ephemeral: true})
}

// Info keeps msg among the resource's diagnostics.
func (l HookLog) Info(msg string) {
	_ = l.ctx.Log.Info(msg, &pulumi.LogArgs{Resource: l.res})
}

// urnResource is a resource the log knows by its URN alone.
type urnResource struct {
	pulumi.ResourceState
	urn pulumi.URNOutput
}

func (r *urnResource) URN() pulumi.URNOutput { return r.urn }
