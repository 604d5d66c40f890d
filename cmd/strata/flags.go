package main

import (
	"fmt"
	"strconv"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"
)

// overrides collects flags whose values, when given on the command line, win
// over the configuration file and the embedded default. A flag that is not
// given leaves the configuration alone, so the file stays the single source of
// a value unless the operator says otherwise.
type overrides struct {
	cmd   *kingpin.CmdClause
	apply []func(*Config)
	// value reads each flag's effective value back from the configuration,
	// for /api/v1/status/flags.
	value map[string]func(*Config) string
}

func (o *overrides) read(name string, f func(*Config) string) {
	if o.value == nil {
		o.value = map[string]func(*Config) string{}
	}
	o.value[name] = f
}

func (o *overrides) duration(name, help string, field func(*Config) *model.Duration) {
	v := new(model.Duration)
	set := o.flag(name, help, v)
	o.read(name, func(c *Config) string { return field(c).String() })
	o.apply = append(o.apply, func(c *Config) {
		if *set {
			*field(c) = *v
		}
	})
}

func (o *overrides) bytes(name, help string, field func(*Config) *ByteSize) {
	v := new(ByteSize)
	set := o.flag(name, help, v)
	o.read(name, func(c *Config) string { return field(c).String() })
	o.apply = append(o.apply, func(c *Config) {
		if *set {
			*field(c) = *v
		}
	})
}

func (o *overrides) int(name, help string, field func(*Config) *int) {
	v := new(intValue)
	set := o.flag(name, help, v)
	o.read(name, func(c *Config) string { return strconv.Itoa(*field(c)) })
	o.apply = append(o.apply, func(c *Config) {
		if *set {
			*field(c) = int(*v)
		}
	})
}

func (o *overrides) string(name, help string, field func(*Config) *string) {
	v := new(stringValue)
	set := o.flag(name, help, v)
	o.read(name, func(c *Config) string { return *field(c) })
	o.apply = append(o.apply, func(c *Config) {
		if *set {
			*field(c) = string(*v)
		}
	})
}

func (o *overrides) bool(name, help string, field func(*Config) *bool) {
	v := new(bool)
	set := new(bool)
	o.cmd.Flag(name, help).IsSetByUser(set).BoolVar(v)
	o.read(name, func(c *Config) string { return strconv.FormatBool(*field(c)) })
	o.apply = append(o.apply, func(c *Config) {
		if *set {
			*field(c) = *v
		}
	})
}

func (o *overrides) flag(name, help string, v kingpin.Value) *bool {
	set := new(bool)
	o.cmd.Flag(name, help).IsSetByUser(set).SetValue(v)
	return set
}

func (o *overrides) applyTo(c *Config) {
	for _, f := range o.apply {
		f(c)
	}
}

type intValue int

func (i *intValue) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not an integer: %q", s)
	}
	*i = intValue(v)
	return nil
}

func (i *intValue) String() string { return strconv.Itoa(int(*i)) }

type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }
