package talos

import (
	"context"
	"sync"
)

// future is a value a hook waits for: an output resolved later in the run.
type future[T any] struct {
	once sync.Once
	done chan struct{}
	v    T
	err  error
}

func newFuture[T any]() *future[T] { return &future[T]{done: make(chan struct{})} }

func (f *future[T]) set(v T, err error) {
	f.once.Do(func() {
		f.v, f.err = v, err
		close(f.done)
	})
}

func (f *future[T]) get(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
