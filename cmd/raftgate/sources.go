package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/raftgate/raftgate/server"
)

// envName is the environment variable of a flag: RAFTGATE_NODE_ID for
// --node-id.
func envName(flag string) string {
	return "RAFTGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag the command line left unset from its
// RAFTGATE_* variable. Afterwards such flags count as set, so a config file
// applied later fills only what neither flags nor env gave.
func applyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if firstErr != nil || f.Changed || f.Name == "help" {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			firstErr = fmt.Errorf("%s=%q: %v", envName(f.Name), v, err)
		}
	})
	return firstErr
}

// warnUnknownEnv logs at warn the RAFTGATE_* variables that name no flag
// of any raftgate command (a typo, a renamed flag): they are ignored, and an
// operator should hear of it, as an unknown config-file key is refused.
// Only names are logged: a value may be a secret.
func warnUnknownEnv(cmd *cobra.Command, env cliEnv, logger zerolog.Logger) {
	if env.environ == nil {
		return
	}
	if unknown := unknownEnv(cmd.Root(), env.environ()); len(unknown) > 0 {
		logger.Warn().Strs("variables", unknown).
			Msg("ignoring RAFTGATE_* environment variables that name no raftgate flag (RAFTGATE_<FLAG>, like RAFTGATE_NODE_ID)")
	}
}

// unknownEnv returns the RAFTGATE_* names in environ that are the variable
// of no flag of root or its subcommands, sorted.
func unknownEnv(root *cobra.Command, environ []string) []string {
	known := make(map[string]bool)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { known[envName(f.Name)] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	// Read by the server, not flags: the crash tests' failpoints.
	known[server.FailpointEnv], known[server.FailpointSeedEnv] = true, true
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "RAFTGATE_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return slices.Compact(unknown)
}

// applyConfigFile sets every flag still unset from the config file at path
// (TOML or YAML by extension; keys are flag names, "_" accepted for "-").
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	values, err := loadConfigFile(path)
	if err != nil {
		return err
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		name := strings.ReplaceAll(key, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == "config" || name == "help" {
			return fmt.Errorf("config file %s: unknown key %q (keys are the flag names of `raftgate server`, like node-id)", path, key)
		}
		if f.Changed {
			continue
		}
		if err := fs.Set(name, values[key]); err != nil {
			return fmt.Errorf("config file %s: %s: %v", path, key, err)
		}
	}
	return nil
}

// loadConfigFile reads a flat TOML or YAML file into flag-syntax strings.
func loadConfigFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	raw := map[string]any{}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		err = toml.Unmarshal(data, &raw)
	case ".yaml", ".yml":
		err = yaml.Unmarshal(data, &raw)
	default:
		return nil, fmt.Errorf("config file %s: want a .toml, .yaml or .yml file", path)
	}
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		s, err := flagText(v)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %s: %v", path, k, err)
		}
		out[k] = s
	}
	return out, nil
}

// flagText renders a decoded config value the way it would be written on the
// command line: lists joined with commas, maps as k=v (for
// initial-cluster: {1 = "host:port"}).
func flagText(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			s, err := flagText(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return mapText(v)
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = e
		}
		return mapText(m)
	default:
		return "", fmt.Errorf("unsupported value %v (%T)", v, v)
	}
}

func mapText(m map[string]any) (string, error) {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s, err := flagText(m[k])
		if err != nil {
			return "", err
		}
		parts = append(parts, k+"="+s)
	}
	return strings.Join(parts, ","), nil
}
