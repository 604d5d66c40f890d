package main

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"gopkg.in/yaml.v3"
)

// statusYAML is the configuration as /api/v1/status/config shows it: every
// key with its effective value (embedded default, file and flags applied),
// secrets masked as Prometheus masks them. A password in a URL becomes
// "xxxxx" (Prometheus' config.URL); the value of a key that names a secret
// (password, token, secret, credentials, but not a *_file path) becomes
// "<secret>" (Prometheus' config.Secret, which also masks itself when a
// package uses it).
func (c Config) statusYAML() (string, error) {
	var doc yaml.Node
	if err := doc.Encode(c); err != nil {
		return "", fmt.Errorf("encode configuration: %w", err)
	}
	maskSecrets(&doc, false)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", fmt.Errorf("encode configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("encode configuration: %w", err)
	}
	return b.String(), nil
}

// secretToken is what Prometheus shows instead of a secret.
const secretToken = "<secret>"

// maskSecrets masks, in place, the secrets of the YAML tree n; secret says n
// is the value of a key that names a secret.
func maskSecrets(n *yaml.Node, secret bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		switch {
		case secret && n.Value != "":
			n.Value, n.Tag, n.Style = secretToken, "!!str", 0
		case strings.Contains(n.Value, "://"):
			if u, err := url.Parse(n.Value); err == nil {
				if _, ok := u.User.Password(); ok {
					n.Value = u.Redacted()
				}
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			maskSecrets(n.Content[i+1], namesSecret(n.Content[i].Value))
		}
	default: // documents, sequences, aliases
		for _, c := range n.Content {
			maskSecrets(c, secret)
		}
	}
}

// namesSecret reports a configuration key whose value is a secret, as
// Prometheus' configuration types it (basic_auth.password, bearer_token,
// authorization.credentials, oauth2.client_secret, ...). A *_file key holds
// a path, which Prometheus shows.
func namesSecret(key string) bool {
	if strings.HasSuffix(key, "_file") {
		return false
	}
	for _, s := range []string{"password", "secret", "token", "credentials"} {
		if strings.Contains(key, s) {
			return true
		}
	}
	return false
}

// statusFlags is what /api/v1/status/flags answers, as Prometheus' does:
// every flag of `strata serve` and of the application (log.level, ...), by
// name without dashes, with its effective value. A flag that overrides the
// configuration shows the value in cfg, which came from the flag, the
// configuration file or the embedded default; kingpin's hidden flags
// (help-long, completion scripts) are left out.
func statusFlags(app *kingpin.Application, cmd string, o *overrides, cfg *Config) map[string]string {
	model := app.Model()
	flags := model.Flags
	for _, c := range model.Commands {
		if c.FullCommand == cmd {
			flags = append(flags[:len(flags):len(flags)], c.Flags...)
		}
	}
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		if f.Hidden {
			continue
		}
		if read, ok := o.value[f.Name]; ok {
			out[f.Name] = read(cfg)
			continue
		}
		out[f.Name] = f.Value.String()
	}
	return out
}
