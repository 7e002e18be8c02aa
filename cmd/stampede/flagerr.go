package main

import (
	"errors"
	"strings"

	"github.com/stampede-lab/stampede"
)

// flagErrors renders the Validate error of a configuration that a
// command's flags set, every bad field at once: each field error as
// "--<prefix><field>: message", the field's snake_case name in
// kebab-case. A configuration names its fields as its flags do (the same
// words), so no table maps one to the other; prefix is the flags' common
// start, such as "webhook-" for the webhook sender's. An invalid error
// that names no field is its message alone. nil gives nil.
func flagErrors(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var lines []string
	for _, e := range stampede.FieldErrors(err) {
		if e.Field == "" {
			if e.Code == stampede.Invalid && e.Status == 0 && e.Err == nil {
				// A problem of several flags, already worded for
				// the command line: its code adds nothing.
				lines = append(lines, e.Message)
			} else {
				lines = append(lines, e.Error())
			}
			continue
		}
		flag := "--" + prefix + strings.ReplaceAll(strings.ReplaceAll(e.Field, "_", "-"), ".", "-")
		lines = append(lines, flag+": "+e.Message)
	}
	return errors.New(strings.Join(lines, "\n"))
}
