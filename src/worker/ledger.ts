/**
 * What one filter has open: the requests handed to the app whose response has
 * not closed yet (an HTTP/1.1 `ServerResponse`, an HTTP/2 stream), the ones
 * among them sorted out as event streams, and the drain's counts. Both
 * protocol adapters keep their open requests here (http1-filter.ts,
 * http2-filter.ts); the adapter decides what enters, the ledger keeps the books.
 *
 * Per request this is the hot path: an array write to add, an array write to
 * take out, no closure, no allocation. The open entries sit in a dense array,
 * each holding its index under SLOT; a Set hashed every response (about 75 ns
 * a request, measured in bench/; docs/benchmarks.md). Event streams are found
 * among the open entries at drain time only (`sortEventStreams`), never per
 * request. Whether a closing response completed is asked during the drain
 * only, of the adapter (`completed`), which knows its protocol's state.
 * HTTP/2 streams are kept lazily until the drain (`lazy`): no listener per
 * stream while serving.
 */

/** A lazy ledger's first sweep, and the least it waits for between two (`Ledger.lazy`). */
const SWEEP_MIN = 64;
/** The most entries a lazy ledger adds between two sweeps. */
const SWEEP_MAX_GAP = 1024;

/** Where an open entry sits in its ledger's `open` array. */
const SLOT = Symbol('graceful-cluster.slot');
type Slotted = {[SLOT]?: number | undefined};

/** What a ledger can hold: anything that says when it closes (`'close'` fires for finished and aborted alike). */
export interface Closable {
	once(event: 'close', listener: () => void): unknown;
	on(event: 'close', listener: (this: never) => void): unknown;
}

export class Ledger<T extends Closable> {
	/** Responses to app requests that completed during the drain. */
	served = 0;
	/**
	 * Responses to app requests that closed during the drain without
	 * completing: the client went away, the app destroyed the response, or its
	 * connection was cut. Apart from `served`, so a drain that cut responses
	 * does not read clean.
	 */
	aborted = 0;
	/** Requests answered with the drain 503 (or, for an event stream, a `retry:` and an end). */
	rejected = 0;
	/**
	 * Requests a retiring worker (a reload) sent elsewhere instead of serving
	 * them: an event stream told to reconnect at once, a WebSocket handshake
	 * answered `503` + `Retry-After: 0`. Not refusals (the pod serves them, on
	 * another worker), so not in `rejected`, which the primary counts as
	 * requests the pod turned away (`requests_rejected_total`, `drain finished`).
	 */
	redirected = 0;
	/**
	 * Requests handed to the app since the filter was installed: one field
	 * increment (no measurable cost: docs/benchmarks.md); the heartbeat reads it
	 * once a second for `--max-requests`.
	 */
	requests = 0;
	/**
	 * The one `'close'` listener for every entry, made once per ledger;
	 * EventEmitter calls it with the entry as `this`. `'close'`, never
	 * `'finish'`: a client that went away never finishes its response, and the
	 * count would never reach zero (stoppable's bug). `'close'` fires for an
	 * aborted response too, so the drain asks `completed` which one it was.
	 */
	readonly onClose: (this: T) => void;
	private readonly open: T[] = [];
	/** Entries sorted out of `open` as event streams, still open. */
	private readonly eventStreams = new Set<T>();
	private isDraining = false;
	/**
	 * With `isClosed` (HTTP/2 streams), entries are kept without a `'close'`
	 * listener until the drain starts (or `entries` is asked for): on an HTTP/2
	 * stream, whose `'newListener'` Node watches, adding one cost about 1,800
	 * instructions, 1.3 % of an h2c stream (bench/instructions.js). The ones
	 * done (`isClosed`) are swept out of `open` when it has doubled since the
	 * last sweep (amortized: a property read per entry), and when `inflight`
	 * is read.
	 */
	private lazy: boolean;
	private sweepAt = SWEEP_MIN;

	/**
	 * `onIdle`: the last entry in flight closed during a drain, or an event
	 * stream closed then (the drain waits for the ones it ended to finish).
	 * `completed`: whether an entry that closed had completed (its whole
	 * response handed on); asked during the drain only, never per request.
	 */
	constructor(private readonly onIdle: () => void, completed: (entry: T) => boolean, private readonly isClosed?: (entry: T) => boolean) {
		this.lazy = isClosed !== undefined;
		const ledger = this;
		this.onClose = function (this: T) {
			if (ledger.forget(this) && ledger.draining) {
				if (completed(this)) {
					ledger.served++;
				} else {
					ledger.aborted++;
				}

				if (ledger.open.length === 0) {
					onIdle();
				}
			}
		};
	}

	/** Set when the drain starts: from then on a closing entry counts as served or aborted, and the last one calls `onIdle`. */
	get draining(): boolean {
		return this.isDraining;
	}

	set draining(value: boolean) {
		if (value) {
			this.track();
		}

		this.isDraining = value;
	}

	/** Requests in flight: open, event streams sorted out. */
	get inflight(): number {
		if (this.lazy) {
			this.sweep();
		}

		return this.open.length;
	}

	/** Event streams still open, among those sorted out by `sortEventStreams()`. */
	get streams(): number {
		return this.eventStreams.size;
	}

	/** The entries in flight, for a pass at drain time; not to be changed. */
	get entries(): readonly T[] {
		this.track();
		return this.open;
	}

	/** An entry handed to the app: in flight until its `'close'`. */
	add(entry: T): void {
		this.requests++;
		if (this.lazy) {
			if (this.open.push(entry) >= this.sweepAt) {
				this.sweep();
			}

			return;
		}

		(entry as Slotted)[SLOT] = this.open.length;
		this.open.push(entry);
		entry.on('close', this.onClose as (this: never) => void);
	}

	/** True while `entry` is in flight (not closed, not sorted out). */
	has(entry: T): boolean {
		this.track();
		return (entry as Slotted)[SLOT] !== undefined;
	}

	/**
	 * Lazy: drops the entries that are done; the next sweep when what is left
	 * has doubled, or grown by SWEEP_MAX_GAP: after a peak, closed streams are
	 * not kept by the thousand until the next one.
	 */
	private sweep(): void {
		const {open, isClosed} = this;
		let kept = 0;
		for (const entry of open) {
			if (!isClosed!(entry)) {
				open[kept++] = entry;
			}
		}

		open.length = kept;
		this.sweepAt = kept + Math.min(Math.max(SWEEP_MIN, kept), SWEEP_MAX_GAP);
	}

	/**
	 * From lazy to tracked, once for good: the entries still open each get
	 * their place and the `'close'` listener, as `add` gives them otherwise, in
	 * the sweep's turn, so before their `'close'` can come.
	 */
	private track(): void {
		if (!this.lazy) {
			return;
		}

		this.sweep();
		this.lazy = false;
		for (const [index, entry] of this.open.entries()) {
			(entry as Slotted)[SLOT] = index;
			entry.on('close', this.onClose as (this: never) => void);
		}
	}

	/**
	 * Moves the entries in flight that `isEventStream` says are event streams
	 * out of `inflight`, into `streams`: one pass, at drain time only. An entry
	 * whose headers do not say so yet stays in flight until a later pass. Does
	 * not call `onIdle`: the drain checks for idleness after sorting.
	 */
	sortEventStreams(isEventStream: (entry: T) => boolean): void {
		this.track();
		// Backwards: `forget` moves the last entry into the freed slot, and that one
		// has been looked at already.
		for (let index = this.open.length - 1; index >= 0; index--) {
			const entry = this.open[index]!;
			if (isEventStream(entry) && this.forget(entry)) {
				this.eventStreams.add(entry);
				entry.once('close', () => {
					this.eventStreams.delete(entry);
					if (this.draining && this.open.length === 0) {
						this.onIdle();
					}
				});
			}
		}
	}

	/** Calls `end` on each event stream still open; returns how many there were. */
	endEventStreams(end: (entry: T) => void): number {
		const count = this.eventStreams.size;
		for (const entry of this.eventStreams) {
			end(entry);
		}

		return count;
	}

	/**
	 * Takes the event streams still open off the books, then calls `cut` on
	 * each (destroys it); returns how many there were. Off the books first:
	 * their `'close'` comes later, and each must be counted once, as cut, not
	 * again as still open (drain.ts `longLivedSettled`).
	 */
	cutEventStreams(cut: (entry: T) => void): number {
		const streams = [...this.eventStreams];
		this.eventStreams.clear();
		for (const entry of streams) {
			cut(entry);
		}

		return streams.length;
	}

	/**
	 * Takes `entry` out of `open` (the last one moves into its place). False when
	 * it was already out: its close was counted once.
	 */
	private forget(entry: T): boolean {
		const index = (entry as Slotted)[SLOT];
		if (index === undefined) {
			return false;
		}

		(entry as Slotted)[SLOT] = undefined;
		const last = this.open.pop()!;
		if (last !== entry) {
			this.open[index] = last;
			(last as Slotted)[SLOT] = index;
		}

		return true;
	}
}
