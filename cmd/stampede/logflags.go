package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/internal/logging"
)

// logOptions are the root's persistent --log-format and --log-level.
type logOptions struct {
	format logging.Format
	level  slog.Level
}

// formatValue is --log-format as a pflag.Value: a bad value fails at parse
// time, naming the flag (or the variable).
type formatValue struct{ f *logging.Format }

func (v formatValue) String() string {
	if v.f == nil || *v.f == logging.FormatAuto {
		return "auto"
	}
	return string(*v.f)
}

func (v formatValue) Set(s string) error {
	f, err := logging.ParseFormat(s)
	if err == nil {
		*v.f = f
	}
	return err
}

func (formatValue) Type() string { return "json|text" }

// levelValue is --log-level as a pflag.Value.
type levelValue struct{ l *slog.Level }

func (v levelValue) String() string {
	if v.l == nil {
		return "info"
	}
	return strings.ToLower(v.l.String())
}

func (v levelValue) Set(s string) error {
	l, err := logging.ParseLevel(s)
	if err == nil {
		*v.l = l
	}
	return err
}

func (levelValue) Type() string { return "level" }

// flags adds --log-format and --log-level to fs.
func (o *logOptions) flags(fs *pflag.FlagSet) {
	o.level = slog.LevelInfo
	fs.Var(formatValue{&o.format}, "log-format", "log line format: json or text; auto: text when stderr is a terminal, else json")
	fs.Var(levelValue{&o.level}, "log-level", "log level: debug (logs every request), info, warn or error")
}

// loggerKey is the context key of the command's logger.
type loggerKey struct{}

// setup applies the environment to cmd's flags, then makes the process's
// logger on cmd's stderr (slog's default, go-redis's too) and keeps it in
// cmd's context for loggerOf.
func (o *logOptions) setup(cmd *cobra.Command) error {
	if err := applyEnv(cmd.Flags()); err != nil {
		return err
	}
	log := logging.Setup(cmd.ErrOrStderr(), o.format, o.level)
	cmd.SetContext(context.WithValue(cmd.Context(), loggerKey{}, log))
	return nil
}

// loggerOf is the logger the root command made for cmd's run, or slog's
// default.
func loggerOf(cmd *cobra.Command) *slog.Logger {
	if ctx := cmd.Context(); ctx != nil {
		if log, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
			return log
		}
	}
	return slog.Default()
}
