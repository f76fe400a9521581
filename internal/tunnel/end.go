package tunnel

import (
	"time"
)

// How a stream ends: closed or reset here, finished or reset by the peer,
// or with its session; and the timers that go with it.

// CloseWrite tells the peer this side will write no more (FIN); reads go
// on until the peer does the same.
func (st *stream) CloseWrite() error {
	st.mu.Lock()
	if st.finSent || st.closed || st.reset {
		st.mu.Unlock()
		return nil
	}
	st.finSent = true
	notify(st.writable)
	st.mu.Unlock()
	return st.s.write(header{typ: typeWindow, flags: flagFIN, stream: st.id}, nil)
}

// Close ends both directions. Data the peer sent that was never read is
// dropped, and if the peer is still writing it is reset (RST), as TCP does:
// nobody will read what it sends. Otherwise the peer gets a FIN and has
// StreamCloseTimeout to finish its side before the stream is reset.
func (st *stream) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	unread := len(st.chunks) > 0
	st.dropChunks()
	st.stopTimersLocked()
	st.wakeSourceLocked()
	notify(st.readable)
	notify(st.writable)
	var flags uint16
	finished := false
	switch {
	case st.reset:
		finished = true
	case unread && !st.finRecv:
		st.reset = true
		flags, finished = flagRST, true
	default:
		if !st.finSent {
			st.finSent = true
			flags = flagFIN
		}
		finished = st.finRecv
		if !finished && !st.gone {
			st.ctimer = time.AfterFunc(st.s.cfg.StreamCloseTimeout, st.closeTimedOut)
		}
	}
	st.mu.Unlock()
	if finished {
		st.s.forget(st)
	}
	if flags != 0 {
		return st.s.write(header{typ: typeWindow, flags: flags, stream: st.id}, nil)
	}
	return nil
}

// Reset ends both directions at once and tells the peer with a reset
// (RST) rather than a FIN, whatever was read: the peer's reads then fail
// with ErrStreamReset once what arrived before it is read, instead of
// ending as if all had come. A relay calls it when the connection it
// relays fails (the API server reset it), so the hub can tell a cut answer
// from a whole one. A stream already reset, or finished both ways, sends
// nothing. Close after Reset does nothing.
func (st *stream) Reset() error {
	st.mu.Lock()
	send := !st.reset && !(st.finSent && st.finRecv)
	st.closed = true
	st.abandonLocked()
	st.mu.Unlock()
	st.s.forget(st)
	if send {
		return st.s.write(header{typ: typeWindow, flags: flagRST, stream: st.id}, nil)
	}
	return nil
}

// closeTimedOut resets a closed stream whose peer never finished its side.
func (st *stream) closeTimedOut() {
	st.mu.Lock()
	late := !st.finRecv && !st.reset
	st.reset = true
	st.wakeSourceLocked()
	st.mu.Unlock()
	if late {
		st.s.forget(st)
		st.s.queue(header{typ: typeWindow, flags: flagRST, stream: st.id})
	}
}

// peerFinished records the peer's FIN. A stream closed here is then over.
func (st *stream) peerFinished() {
	st.mu.Lock()
	st.finRecv = true
	over := st.closed
	if over {
		st.stopTimersLocked()
	}
	st.readableLocked()
	st.mu.Unlock()
	if over {
		st.s.forget(st)
	}
}

// peerReset ends the stream at once: writes fail, and reads fail once
// what arrived before the reset is read, so the last bytes the peer sent
// (a TLS alert, say) still reach whoever reads them.
func (st *stream) peerReset() {
	st.mu.Lock()
	st.reset = true
	st.stopTimersLocked()
	st.wakeSourceLocked()
	st.readableLocked()
	notify(st.writable)
	st.mu.Unlock()
	st.s.forget(st)
}

// abandon resets the stream here, drops what it buffered, and forgets it.
func (st *stream) abandon() {
	st.mu.Lock()
	st.abandonLocked()
	st.mu.Unlock()
	st.s.forget(st)
}

// abandonLocked is abandon but for forgetting the stream. st.mu is held.
func (st *stream) abandonLocked() {
	st.reset = true
	st.dropChunks()
	st.stopTimersLocked()
	st.wakeSourceLocked()
	notify(st.readable)
	notify(st.writable)
}

// dropChunks returns the buffered data to the pool. st.mu is held.
func (st *stream) dropChunks() {
	for _, c := range st.chunks {
		putChunk(c)
	}
	st.chunks, st.off = nil, 0
}

// stopTimers stops the stream's timers when its session ends.
func (st *stream) stopTimers() {
	st.mu.Lock()
	st.gone = true
	st.stopTimersLocked()
	st.mu.Unlock()
}

// tellEnded tells onReadable that the session has ended: a Read now
// returns its error.
func (st *stream) tellEnded() {
	st.mu.Lock()
	st.wakeSourceLocked()
	if st.onReadable != nil {
		st.onReadable()
	}
	st.mu.Unlock()
}

func (st *stream) stopTimersLocked() {
	for _, t := range []*time.Timer{st.rtimer, st.wtimer, st.ctimer} {
		if t != nil {
			t.Stop()
		}
	}
	st.rtimer, st.wtimer, st.ctimer = nil, nil, nil
}
