// Package bucket opens the object-storage bucket an objstore.yml describes,
// in the format of github.com/thanos-io/objstore (Thanos' objstore.yml):
//
//	type: S3            # S3, GCS, AZURE or FILESYSTEM
//	prefix: shard-0     # optional: every object name starts with it
//	config:
//	  bucket: strata
//	  endpoint: s3.eu-west-1.amazonaws.com
//
// The config section is the provider's own (objstore's documentation lists
// every key). Only these four providers are compiled in, to keep the other
// clouds' SDKs out of the binary.
//
// Data flow: cmd/strata opens the bucket and hands it to tiers (the rollup
// tiers in object storage).
package bucket

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/thanos-io/objstore"
	"github.com/thanos-io/objstore/providers/azure"
	"github.com/thanos-io/objstore/providers/filesystem"
	"github.com/thanos-io/objstore/providers/gcs"
	"github.com/thanos-io/objstore/providers/s3"
	"gopkg.in/yaml.v3"
)

// Config is an objstore.yml.
type Config struct {
	Type   string    `yaml:"type"`
	Prefix string    `yaml:"prefix"`
	Config yaml.Node `yaml:"config"`
}

// Parse reads conf (the contents of an objstore.yml) and checks its type,
// without opening the bucket (which may reach the network).
func Parse(conf []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(string(conf)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("parse objstore configuration: %w", err)
	}
	switch strings.ToUpper(c.Type) {
	case string(objstore.S3), string(objstore.GCS), string(objstore.AZURE), string(objstore.FILESYSTEM):
		return c, nil
	case "":
		return c, errors.New("objstore configuration: no type (S3, GCS, AZURE or FILESYSTEM)")
	default:
		return c, fmt.Errorf("objstore configuration: type %q is not supported (S3, GCS, AZURE or FILESYSTEM)", c.Type)
	}
}

// Open returns the bucket conf (the contents of an objstore.yml) describes.
// The caller MUST Close it.
func Open(ctx context.Context, conf []byte, logger *slog.Logger) (objstore.Bucket, error) {
	c, err := Parse(conf)
	if err != nil {
		return nil, err
	}
	sub, err := yaml.Marshal(&c.Config)
	if err != nil {
		return nil, fmt.Errorf("objstore configuration: %w", err)
	}
	if c.Config.IsZero() {
		sub = []byte("{}")
	}
	l := kitLogger{logger}
	const component = "strata"
	var b objstore.Bucket
	switch strings.ToUpper(c.Type) {
	case string(objstore.S3):
		b, err = s3.NewBucket(l, sub, component, nil)
	case string(objstore.GCS):
		b, err = gcs.NewBucket(ctx, l, sub, component, nil)
	case string(objstore.AZURE):
		b, err = azure.NewBucket(l, sub, component, nil)
	default: // FILESYSTEM: Parse accepts no other
		b, err = filesystem.NewBucketFromConfig(sub)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s bucket: %w", c.Type, err)
	}
	if p := strings.Trim(c.Prefix, "/"); p != "" {
		b = objstore.NewPrefixedBucket(b, p)
	}
	return b, nil
}

// kitLogger is the go-kit logger objstore's providers take, writing to slog.
type kitLogger struct{ l *slog.Logger }

func (k kitLogger) Log(keyvals ...any) error {
	msg, level := "", slog.LevelDebug
	attrs := make([]any, 0, len(keyvals))
	for i := 0; i+1 < len(keyvals); i += 2 {
		key := fmt.Sprint(keyvals[i])
		switch key {
		case "msg":
			msg = fmt.Sprint(keyvals[i+1])
		case "level":
			switch fmt.Sprint(keyvals[i+1]) {
			case "error":
				level = slog.LevelError
			case "warn":
				level = slog.LevelWarn
			case "info":
				level = slog.LevelInfo
			}
		default:
			attrs = append(attrs, key, keyvals[i+1])
		}
	}
	k.l.Log(context.Background(), level, msg, attrs...)
	return nil
}
