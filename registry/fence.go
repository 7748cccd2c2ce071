package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/raftgate/raftgate/rpc"
)

// Fencer tells one partition's leader of a registry change
// (rpc.FenceService): from then on the partition refuses an invocation
// checked against an older registration of the service.
type Fencer interface {
	FenceService(ctx context.Context, partition uint32, service string, index uint64) error
}

// Writer changes the registry the one way a change may be answered: only
// once every partition was fenced at it. The ingress checks a hit in its
// local replica, which may lag (IngressLookup), so once Put or Delete is
// answered no invocation checked against an older registration of the
// service is accepted anywhere.
type Writer struct {
	Registry *Registry
	// Fences reaches every partition's leader (the node's dispatch client).
	Fences Fencer
	// Partitions is the cluster's partition count (1..Partitions).
	Partitions uint32
}

// Put registers svc (leader-only, as Registry.Put), then fences every
// partition at the change.
func (w Writer) Put(ctx context.Context, svc *rpc.Service) error {
	index, err := w.Registry.Put(ctx, svc)
	if err != nil {
		return err
	}
	return w.fenceAll(ctx, svc.GetName(), index)
}

// Delete removes a service and fences every partition at the removal. A
// service found missing is fenced too, at the index where it was found
// missing, and then answered rpc.ErrNotFound: a retry after a fan-out
// that failed half-way completes it.
func (w Writer) Delete(ctx context.Context, name string) error {
	index, err := w.Registry.Delete(ctx, name)
	if err != nil && (!errors.Is(err, rpc.ErrNotFound) || index == 0) {
		return err
	}
	if ferr := w.fenceAll(ctx, name, index); ferr != nil {
		return ferr
	}
	return err
}

// fenceAll fences service at index in every partition, in parallel.
func (w Writer) fenceAll(ctx context.Context, service string, index uint64) error {
	errs := make([]error, w.Partitions+1)
	var wg sync.WaitGroup
	for p := uint32(1); p <= w.Partitions; p++ {
		wg.Go(func() {
			if err := w.Fences.FenceService(ctx, p, service, index); err != nil {
				errs[p] = fmt.Errorf("partition %d: %w", p, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// Only ErrUnavailable is wrapped: a partition's lost leadership must
		// not make the dispatch client repeat the whole change by itself.
		return fmt.Errorf("service %q changed (metadata index %d), but not every partition has been told yet; retrying the request is safe: %w (%v)",
			service, index, rpc.ErrUnavailable, err)
	}
	return nil
}
