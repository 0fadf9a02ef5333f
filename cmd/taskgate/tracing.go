package main

import (
	"context"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy/tracing"
)

// tracingFlush bounds the flush of buffered spans at exit.
const tracingFlush = 5 * time.Second

// setupTracing starts OpenTelemetry tracing when the standard OTEL_*
// variables ask for it (tracing.FromEnv) and returns the tracer (nil when
// off) and the function that flushes and stops it at exit.
func setupTracing(log zerolog.Logger) (*tracing.Tracer, func(), error) {
	if err := tracing.Check(os.Getenv); err != nil {
		return nil, nil, err
	}
	tr, err := tracing.FromEnv(context.Background(), versionString())
	if err != nil {
		return nil, nil, err
	}
	if tr == nil {
		return nil, func() {}, nil
	}
	log.Info().Msg("OpenTelemetry tracing on (OTEL_* variables)")
	return tr, func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("flushing trace spans at exit failed")
		}
	}, nil
}
