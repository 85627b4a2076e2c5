// Copyright: contributors to bcd.devices
// GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

// cdicheck loads CDI spec directories with the reference CDI library
// (tags.cncf.io/container-device-interface, the one container runtimes link)
// and reports every error the library finds, so the end-to-end suite can prove
// that the specs bcd.devices writes are accepted by the same code a runtime uses.
//
//	cdicheck [-schema] [-inject] [-json FILE] DIR...
//
// Every .json and .yaml file of each DIR is loaded by a CDI cache, exactly as a
// runtime's cache does it (strict parsing, spec version rules, names, edits,
// conflicting devices between files). With -schema the official JSON schema the
// library embeds is enforced as well. With -inject every device the cache
// resolved is injected into an empty OCI spec, one device at a time, which
// also resolves device nodes given only by path against the host (/dev).
// The exit status is 0 when nothing failed, 1 when anything did, 2 on a usage error.
// -json writes what was loaded and every error, for the suite to compare.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/cdi/validate"
	"tags.cncf.io/container-device-interface/schema"
)

type specReport struct {
	Path    string   `json:"path"`
	Kind    string   `json:"kind"`
	Version string   `json:"cdiVersion"`
	Devices []string `json:"devices"`
}

type injected struct {
	Env            []string `json:"env"`
	DeviceNodes    []string `json:"deviceNodes"`
	Mounts         []string `json:"mounts"`
	Hooks          int      `json:"hooks"`
	AdditionalGids []uint32 `json:"additionalGids"`
}

type report struct {
	Library      string              `json:"library"`
	Schema       bool                `json:"schema"`
	Dirs         []string            `json:"dirs"`
	Specs        []specReport        `json:"specs"`
	Devices      []string            `json:"devices"`
	Errors       map[string][]string `json:"errors"`
	DirErrors    map[string]string   `json:"dirErrors"`
	InjectErrors map[string]string   `json:"injectErrors"`
	Injected     map[string]injected `json:"injected"`
}

func main() {
	useSchema := flag.Bool("schema", false, "also validate every spec against the library's builtin JSON schema")
	inject := flag.Bool("inject", false, "inject every resolved device into an empty OCI spec")
	jsonOut := flag.String("json", "", "write a JSON report to this file")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-schema] [-inject] [-json FILE] DIR...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	dirs := flag.Args()

	if *useSchema {
		cdi.SetSpecValidator(validate.WithSchema(schema.BuiltinSchema()))
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		// NewCache refreshes once; its error is the same one GetErrors lists below.
		fmt.Fprintf(os.Stderr, "cdicheck: loading: %v\n", err)
	}

	rep := report{
		Library:      "tags.cncf.io/container-device-interface (CDI spec " + cdi.CurrentVersion + ")",
		Schema:       *useSchema,
		Dirs:         dirs,
		Devices:      cache.ListDevices(),
		Errors:       map[string][]string{},
		DirErrors:    map[string]string{},
		InjectErrors: map[string]string{},
		Injected:     map[string]injected{},
	}
	failed := false

	for dir, derr := range cache.GetSpecDirErrors() {
		rep.DirErrors[dir] = derr.Error()
		fmt.Fprintf(os.Stderr, "cdicheck: FAIL %s: %v\n", dir, derr)
		failed = true
	}
	for _, dir := range dirs {
		if info, serr := os.Stat(dir); serr != nil || !info.IsDir() {
			rep.DirErrors[dir] = "not a readable directory"
			fmt.Fprintf(os.Stderr, "cdicheck: FAIL %s: not a readable directory\n", dir)
			failed = true
		}
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			rep.Errors[path] = append(rep.Errors[path], e.Error())
			fmt.Fprintf(os.Stderr, "cdicheck: FAIL %s: %v\n", path, e)
		}
		failed = true
	}

	for _, vendor := range cache.ListVendors() {
		for _, spec := range cache.GetVendorSpecs(vendor) {
			sr := specReport{Path: spec.GetPath(), Kind: spec.Kind, Version: spec.Version}
			for _, d := range spec.Devices {
				sr.Devices = append(sr.Devices, spec.Kind+"="+d.Name)
			}
			rep.Specs = append(rep.Specs, sr)
			fmt.Printf("ok %s (%s, cdiVersion %s, %d devices)\n", sr.Path, sr.Kind, sr.Version, len(sr.Devices))
		}
	}
	sort.Slice(rep.Specs, func(i, j int) bool { return rep.Specs[i].Path < rep.Specs[j].Path })

	// A file the cache skipped without an error would go unnoticed: count the files.
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, entry := range entries {
			ext := filepath.Ext(entry.Name())
			if entry.IsDir() || (ext != ".json" && ext != ".yaml") {
				continue
			}
			path := filepath.Clean(filepath.Join(dir, entry.Name()))
			if !loaded(rep.Specs, path) && len(rep.Errors[path]) == 0 {
				rep.Errors[path] = append(rep.Errors[path], "not loaded and no error reported")
				fmt.Fprintf(os.Stderr, "cdicheck: FAIL %s: not loaded and no error reported\n", path)
				failed = true
			}
		}
	}

	if *inject {
		for _, dev := range rep.Devices {
			spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
			if _, ierr := cache.InjectDevices(spec, dev); ierr != nil {
				rep.InjectErrors[dev] = ierr.Error()
				fmt.Fprintf(os.Stderr, "cdicheck: FAIL inject %s: %v\n", dev, ierr)
				failed = true
				continue
			}
			rep.Injected[dev] = summarize(spec)
		}
	}

	fmt.Printf("%d specs, %d devices, %d spec errors, %d injection errors\n",
		len(rep.Specs), len(rep.Devices), countErrors(rep.Errors)+len(rep.DirErrors), len(rep.InjectErrors))
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); werr != nil {
			fmt.Fprintf(os.Stderr, "cdicheck: %v\n", werr)
			os.Exit(2)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func loaded(specs []specReport, path string) bool {
	for _, s := range specs {
		if s.Path == path {
			return true
		}
	}
	return false
}

func countErrors(errs map[string][]string) int {
	n := 0
	for _, e := range errs {
		n += len(e)
	}
	return n
}

func summarize(spec *oci.Spec) injected {
	var out injected
	out.Env = spec.Process.Env
	for _, d := range spec.Linux.Devices {
		out.DeviceNodes = append(out.DeviceNodes, fmt.Sprintf("%s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
	}
	for _, m := range spec.Mounts {
		out.Mounts = append(out.Mounts, m.Source+":"+m.Destination+":"+strings.Join(m.Options, ","))
	}
	if spec.Hooks != nil {
		out.Hooks = len(spec.Hooks.Prestart) + len(spec.Hooks.CreateRuntime) + len(spec.Hooks.CreateContainer) +
			len(spec.Hooks.StartContainer) + len(spec.Hooks.Poststart) + len(spec.Hooks.Poststop)
	}
	out.AdditionalGids = spec.Process.User.AdditionalGids
	return out
}
