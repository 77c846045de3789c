// Command rigkit-oracle: llama-swap v250's own verdict on config files, for rigkit's differential
// test (tests/unit/test_llama_swap_differential.py). Test-only: the operator's machine needs no Go.
//
// It is compiled inside upstream's module tree (tests/harness/llama_swap_release.py copies it to
// cmd/rigkit-oracle/ of the vendored v250 tree), since the loader lives under internal/.
//
// Usage:
//
//	rigkit-oracle < paths       one JSON line per path read from stdin (one path a line):
//	                            {"path": P, "ok": true} or {"path": P, "ok": false, "stage": S, "error": E}
//	rigkit-oracle -extract DIR  a JSON array of the YAML configs written as Go string literals in
//	                            DIR/*_test.go: {"file", "line", "text"} each
//
// A verdict runs what llama-swap.go runs before it serves (llama-swap.go:101, server.go:160-180):
// stage "load" is config.LoadConfigSources(path, "") (the -config flag alone), stage "create" the
// routers server.New builds from the loaded config (router.NewGroup or router.NewMatrix, then
// router.NewPeer; built and shut down at once: no member is started). A panic is stage "panic".
// ${env.X} macros read this process's environment: the caller gives it llama-swap.service's.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/mostlygeek/llama-swap/internal/config"
	"github.com/mostlygeek/llama-swap/internal/logmon"
	"github.com/mostlygeek/llama-swap/internal/router"
	"gopkg.in/yaml.v3"
)

type verdict struct {
	Path  string `json:"path"`
	OK    bool   `json:"ok"`
	Stage string `json:"stage,omitempty"`
	Error string `json:"error,omitempty"`
}

func judge(path string) (v verdict) {
	v.Path = path
	defer func() {
		if r := recover(); r != nil {
			v = verdict{Path: path, Stage: "panic", Error: fmt.Sprint(r)}
		}
	}()
	cfg, err := config.LoadConfigSources(path, "")
	if err != nil {
		return verdict{Path: path, Stage: "load", Error: err.Error()}
	}
	logs := logmon.New()
	switch cfg.Routing.Router.Use {
	case "matrix":
		r, err := router.NewMatrix(cfg, logs, logs)
		if err != nil {
			return verdict{Path: path, Stage: "create", Error: "creating matrix router: " + err.Error()}
		}
		defer r.Shutdown(0)
	default:
		r, err := router.NewGroup(cfg, logs, logs)
		if err != nil {
			return verdict{Path: path, Stage: "create", Error: "creating group router: " + err.Error()}
		}
		defer r.Shutdown(0)
	}
	if _, err := router.NewPeer(cfg, logs); err != nil {
		return verdict{Path: path, Stage: "create", Error: "creating peer router: " + err.Error()}
	}
	v.OK = true
	return v
}

// configKeys: the top-level keys config.Config decodes (its yaml tags), from upstream's own type.
func configKeys() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeOf(config.Config{})
	for i := 0; i < t.NumField(); i++ {
		name := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}

type literal struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// extract: every string literal of DIR/*_test.go that YAML-decodes to a mapping with at least one
// key of config.Config: what upstream's tests feed the loader.
func extract(dir string) ([]literal, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	keys := configKeys()
	out := []literal{}
	fset := token.NewFileSet()
	for _, f := range files {
		tree, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(tree, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			var doc map[string]any
			if yaml.Unmarshal([]byte(text), &doc) != nil || doc == nil {
				return true
			}
			for k := range doc {
				if keys[k] {
					out = append(out, literal{filepath.Base(f), fset.Position(lit.Pos()).Line, text})
					break
				}
			}
			return true
		})
	}
	return out, nil
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-extract" {
		lits, err := extract(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "rigkit-oracle:", err)
			os.Exit(1)
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", " ")
		if err := enc.Encode(lits); err != nil {
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: rigkit-oracle < paths | rigkit-oracle -extract DIR")
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if p := in.Text(); p != "" {
			if err := enc.Encode(judge(p)); err != nil {
				os.Exit(1)
			}
		}
	}
}
