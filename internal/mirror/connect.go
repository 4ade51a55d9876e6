package mirror

import (
	"context"

	"go.uber.org/zap"
)

// connector keeps the connection: it checks PostgreSQL answers, creates
// the tables, loads the cursors once, and tries again with a growing
// delay while it cannot.
func (mr *Mirror) connector(ctx context.Context) {
	delay := mr.cfg.RetryMin
	for {
		err := mr.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			delay = mr.cfg.RetryMin
			select {
			case <-mr.down:
				continue
			case <-ctx.Done():
				return
			}
		}
		mr.fail(err)
		mr.mu.Lock()
		mr.failedConnect = true
		mr.mu.Unlock()
		if !mr.sleep(ctx, delay) {
			return
		}
		delay = min(2*delay, mr.cfg.RetryMax)
	}
}

func (mr *Mirror) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, mr.cfg.ConnectTimeout)
	defer cancel()
	if err := mr.pool.Ping(cctx); err != nil {
		mr.setConnected(false)
		return dbErr{err}
	}
	mr.mu.Lock()
	schema, scanned := mr.schema, mr.scanned
	mr.mu.Unlock()
	if !schema {
		if err := createSchema(cctx, mr.pool, mr.cfg.Table); err != nil {
			return dbErr{err}
		}
		mr.mu.Lock()
		mr.schema = true
		mr.mu.Unlock()
	}
	if !scanned {
		// One query for every cursor (and one for every sidecar), so the
		// scan at start needs none per transcript.
		curs, err := loadCursors(ctx, mr.pool, mr.cfg.Table)
		if err != nil {
			return dbErr{err}
		}
		sides, err := loadAllSidecars(ctx, mr.pool, mr.cfg.Table)
		if err != nil {
			return dbErr{err}
		}
		mr.mu.Lock()
		mr.sidecarsAtStart = sides
		for k, ts := range mr.keys {
			if !ts.known && !ts.busy {
				ts.cur, ts.known, ts.lineage = curs[k], true, 0
				ts.added = 0
			}
		}
		mr.scanned = true
		mr.mu.Unlock()
	}
	was := mr.setConnected(true)
	if !was {
		mr.log.Info("connected to PostgreSQL", zap.String("target", mr.Target()))
	}
	return nil
}

// setConnected records whether PostgreSQL answers and returns what was
// recorded before; workers wait while it does not.
func (mr *Mirror) setConnected(ok bool) bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	was := mr.connected
	mr.connected = ok
	if ok {
		mr.failedConnect = false
		mr.signalLocked()
	}
	return was
}

// lost tells the connector a worker lost the connection.
func (mr *Mirror) lost() {
	if mr.setConnected(false) {
		mr.log.Warn("lost PostgreSQL; appends go on locally and are mirrored once it is back")
	}
	select {
	case mr.down <- struct{}{}:
	default:
	}
}
