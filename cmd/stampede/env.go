package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the name of every environment variable a flag reads.
const envPrefix = "STAMPEDE_"

// envAnnotation is the flag annotation that lists the environment
// variables a flag reads, in order of precedence.
const envAnnotation = "stampede_env"

// envAliases are the variables some flags read besides STAMPEDE_<FLAG>:
// the URL variables documented before every flag had its own.
var envAliases = map[string][]string{
	"redis":    {envRedis},
	"postgres": {envPostgres},
	"nats":     {envNATS},
}

// envName is the environment variable of a flag: STAMPEDE_ and the flag's
// name in upper case with '-' as '_' (--admin-token: STAMPEDE_ADMIN_TOKEN).
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envNames are the variables a flag reads, or none when it reads none.
func envNames(f *pflag.Flag) []string { return f.Annotations[envAnnotation] }

// bindEnvFlags lets every flag of fs be set from the environment
// (STAMPEDE_<FLAG>, then its aliases) and says so in its usage. A flag
// bound already, and --help, are left alone.
func bindEnvFlags(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || envNames(f) != nil {
			return
		}
		names := append([]string{envName(f.Name)}, envAliases[f.Name]...)
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = names
		f.Usage += " (env " + strings.Join(names, " or ") + ")"
	})
}

// bindEnv applies bindEnvFlags to the flags of cmd and of every command
// under it, present now: call it after the subcommands are added.
func bindEnv(cmd *cobra.Command) {
	bindEnvFlags(cmd.PersistentFlags())
	bindEnvFlags(cmd.Flags())
	for _, sub := range cmd.Commands() {
		bindEnv(sub)
	}
}

// applyEnv sets every bound flag of fs that was not given on the command
// line from the first of its variables that is set and not empty, with the
// flag's own parser: an explicit flag beats the environment, and a value
// the flag rejects is an error that names the variable.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		for _, name := range envNames(f) {
			v := os.Getenv(name)
			if v == "" {
				continue
			}
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment variable %s: %w", name, e)
			}
			return
		}
	})
	return err
}
