package talosprovider

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
)

// A schemaDefault is a default a component applies to an input left out,
// set as the schema's default so that every SDK (and the docs) shows it:
// the Go struct the path starts from, the path of pulumi property names,
// and the value. TestSchemaDefaultsAreWhatTheComponentsApply constructs
// each component with the input left out and with this value and finds the
// same resources.
type schemaDefault struct {
	in    reflect.Type
	path  []string
	value any
	// forks are the names of the object types on the path that get a copy
	// of their own, so that this default does not reach another use of
	// the same Go type. One per path element but the last; "" for no copy.
	forks []string
}

// defaulters are the components' own defaulting functions, the one source
// of the schema's defaults (componentDefaults).
var defaulters = []defaulter{
	defaulterOf(talos.ClusterArgs.WithDefaults),
	defaulterOf(proxmox.ClusterArgs.WithDefaults),
	defaulterOf(vps.ClusterArgs.WithDefaults),
	defaulterOf(docker.ClusterArgs.WithDefaults),
}

// derivedDefaults are the inputs, "<Go struct>.<property>", that
// WithDefaults fills from other inputs rather than with a constant: their
// descriptions say what they default to.
var derivedDefaults = []string{
	"talos.ClusterSettings.kubernetesVersion", // from talosVersion
	"talos.ClusterSettings.endpoint",          // from the VIP or the first control plane
	"proxmox.Node.cores",                      // by role
	"proxmox.Node.memory",                     // by role
}

type defaulter struct {
	args  reflect.Type
	apply func(reflect.Value) reflect.Value
}

func defaulterOf[T any](f func(T) T) defaulter {
	return defaulter{args: reflect.TypeFor[T](), apply: func(v reflect.Value) reflect.Value { return reflect.ValueOf(f(v.Interface().(T))) }}
}

var defaults = componentDefaults()

// componentDefaults runs each defaulter on a probe (every object present,
// every list one item long, every plain input left out) and makes what it
// fills in a default of the Go struct that holds the input. Where one
// struct gets different defaults under different parents (Cilium's and the
// approver's chart versions, both talos.ChartSettings), each is set from
// its parent, on a copy of the struct's schema type named after the
// property (CiliumChartSettings).
func componentDefaults() []schemaDefault {
	var found []filled
	for _, d := range defaulters {
		probe := probeOf(d.args)
		walkFilled(probe, d.apply(probe), &found)
	}
	byHolder := map[string][]filled{}
	var order []string
	for _, f := range found {
		key := f.holder.String() + "." + f.prop
		if slices.Contains(derivedDefaults, key) {
			continue
		}
		if _, ok := byHolder[key]; !ok {
			order = append(order, key)
		}
		byHolder[key] = append(byHolder[key], f)
	}
	var out []schemaDefault
	add := func(d schemaDefault) {
		if !slices.ContainsFunc(out, func(o schemaDefault) bool {
			return o.in == d.in && slices.Equal(o.path, d.path) && o.value == d.value
		}) {
			out = append(out, d)
		}
	}
	for _, key := range order {
		fs := byHolder[key]
		if !slices.ContainsFunc(fs, func(f filled) bool { return f.value != fs[0].value }) {
			add(schemaDefault{in: fs[0].holder, path: []string{fs[0].prop}, value: fs[0].value})
			continue
		}
		for _, f := range fs {
			add(schemaDefault{
				in: f.parent, path: []string{f.parentProp, f.prop}, value: f.value,
				forks: []string{strings.ToUpper(f.parentProp[:1]) + f.parentProp[1:] + f.holder.Name()},
			})
		}
	}
	return out
}

// filled is one plain input a defaulter filled: its property in the struct
// holder, and the property that holds that struct in parent.
type filled struct {
	parent, holder   reflect.Type
	parentProp, prop string
	value            any
}

// probeOf is a value of t with every struct field of a struct kind set,
// every pointer to a struct pointing at one, every list of structs one
// item long, and every plain input left out.
func probeOf(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				v.Field(i).Set(probeOf(t.Field(i).Type))
			}
		}
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct {
			p := reflect.New(t.Elem())
			p.Elem().Set(probeOf(t.Elem()))
			v.Set(p)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			v.Set(reflect.Append(v, probeOf(t.Elem())))
		}
	}
	return v
}

// walkFilled finds the plain inputs that after holds and before left out,
// in the struct before and below it.
func walkFilled(before, after reflect.Value, found *[]filled) {
	t := before.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		prop, ok := inputName(sf)
		if !ok {
			continue
		}
		b, a := before.Field(i), after.Field(i)
		if b.Kind() == reflect.Pointer {
			if a.IsNil() {
				continue
			}
			if b.IsNil() {
				if a.Elem().Kind() == reflect.Struct {
					continue
				}
				b = reflect.Zero(a.Elem().Type())
			} else {
				b = b.Elem()
			}
			a = a.Elem()
		}
		switch b.Kind() {
		case reflect.Struct:
			walkFilled(b, a, found)
			setParentProp(found, t, prop)
		case reflect.Slice:
			if b.Type().Elem().Kind() == reflect.Struct {
				for j := range min(b.Len(), a.Len()) {
					walkFilled(b.Index(j), a.Index(j), found)
				}
				setParentProp(found, t, prop)
			}
		case reflect.String, reflect.Int, reflect.Bool:
			if b.IsZero() && !a.IsZero() {
				*found = append(*found, filled{holder: t, prop: prop, value: plain(a)})
			}
		}
	}
}

// setParentProp records, for the inputs found in the struct just walked
// (those without a parent yet), the struct that holds it and under which
// property.
func setParentProp(found *[]filled, parent reflect.Type, prop string) {
	for i := range *found {
		if (*found)[i].parent == nil {
			(*found)[i].parent, (*found)[i].parentProp = parent, prop
		}
	}
}

// plain is v as the schema's JSON value: a named string type as a string.
func plain(v reflect.Value) any {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int:
		return int(v.Int())
	case reflect.Bool:
		return v.Bool()
	default:
		panic(fmt.Sprintf("no schema default of kind %s", v.Kind()))
	}
}
