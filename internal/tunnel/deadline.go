package tunnel

import "time"

// A deadline wakes the call waiting on the stream through a timer, so one
// set while a Read or Write waits ends it.

func (st *stream) SetDeadline(t time.Time) error {
	st.SetReadDeadline(t)
	return st.SetWriteDeadline(t)
}

func (st *stream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.rdl = t
	st.rtimer = setTimer(st.rtimer, t, st.readable)
	return nil
}

func (st *stream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.wdl = t
	st.wtimer = setTimer(st.wtimer, t, st.writable)
	return nil
}

// setTimer arranges for wake to be notified at deadline t (zero: never),
// reusing timer when there is one.
func setTimer(timer *time.Timer, t time.Time, wake chan struct{}) *time.Timer {
	if timer != nil {
		timer.Stop()
	}
	if t.IsZero() {
		return timer
	}
	d := time.Until(t)
	if d <= 0 {
		notify(wake)
		return timer
	}
	if timer == nil {
		return time.AfterFunc(d, func() { notify(wake) })
	}
	timer.Reset(d)
	return timer
}
