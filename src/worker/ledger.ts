/**
 * What one filter has open: the requests handed to the app whose response has not
 * closed yet (an HTTP/1.1 `ServerResponse`, an HTTP/2 stream), the event streams
 * among them, and the drain's counts. The adapter decides what enters; the ledger
 * keeps the books.
 *
 * This is the hot path: an array write to add, one to take out, no closure, no
 * allocation. Entries sit in a dense array, each holding its index under SLOT: a Set
 * hashed every response, about 75 ns a request (bench/filter-micro.js,
 * docs/benchmarks.md). Everything else (event streams, whether a response completed)
 * is asked at drain time only.
 */

const SWEEP_MIN = 64;
const SWEEP_MAX_GAP = 1024;

const SLOT = Symbol('graceful-cluster.slot');
type Slotted = {[SLOT]?: number | undefined};

/** `'close'` fires for finished and aborted alike. */
export interface Closable {
	once(event: 'close', listener: () => void): unknown;
	on(event: 'close', listener: (this: never) => void): unknown;
}

export class Ledger<T extends Closable> {
	served = 0;
	/** Closed during the drain without completing (client gone, destroyed, cut): apart from `served`, so a drain that cut responses does not read clean. */
	aborted = 0;
	rejected = 0;
	/**
	 * Sent elsewhere by a retiring worker (an event stream told to reconnect, a WebSocket
	 * handshake answered `503` + `Retry-After: 0`). Not in `rejected`: the pod serves
	 * them, on another worker.
	 */
	redirected = 0;
	/** Read by the heartbeat once a second for `--max-requests`; the increment has no measurable cost (docs/benchmarks.md). */
	requests = 0;
	/**
	 * Made once per ledger; EventEmitter calls it with the entry as `this`. `'close'`,
	 * never `'finish'`: a client that went away never finishes its response, and the
	 * count would never reach zero (stoppable's bug).
	 */
	readonly onClose: (this: T) => void;
	private readonly open: T[] = [];
	private readonly eventStreams = new Set<T>();
	private isDraining = false;
	/**
	 * HTTP/2 streams are kept without a `'close'` listener until the drain starts: on a
	 * stream, whose `'newListener'` Node watches, adding one costs about 1,800
	 * instructions, 1.3 % of an h2c stream (bench/instructions.js). Done ones are swept
	 * out when `open` has doubled since the last sweep, and when `inflight` is read.
	 */
	private lazy: boolean;
	private sweepAt = SWEEP_MIN;

	/** `completed` is asked during the drain only, never per request. */
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

	/** From the drain on, a closing entry counts as served or aborted, and the last one calls `onIdle`. */
	get draining(): boolean {
		return this.isDraining;
	}

	set draining(value: boolean) {
		if (value) {
			this.track();
		}

		this.isDraining = value;
	}

	get inflight(): number {
		if (this.lazy) {
			this.sweep();
		}

		return this.open.length;
	}

	get streams(): number {
		return this.eventStreams.size;
	}

	get entries(): readonly T[] {
		this.track();
		return this.open;
	}

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

	has(entry: T): boolean {
		this.track();
		return (entry as Slotted)[SLOT] !== undefined;
	}

	/** The next sweep comes when what is left has doubled, or grown by SWEEP_MAX_GAP: after a peak, closed streams are not kept by the thousand. */
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

	/** From lazy to tracked, once for good, in the sweep's turn, so before any entry's `'close'` can come. */
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

	/** One pass, at drain time only. An entry whose headers do not say so yet stays in flight until a later pass. */
	sortEventStreams(isEventStream: (entry: T) => boolean): void {
		this.track();
		// Backwards: `forget` moves the last entry into the freed slot, which has been looked at already.
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

	endEventStreams(end: (entry: T) => void): number {
		const count = this.eventStreams.size;
		for (const entry of this.eventStreams) {
			end(entry);
		}

		return count;
	}

	/** Off the books before the cut: their `'close'` comes later, and each must be counted once, as cut, not again as open. */
	cutEventStreams(cut: (entry: T) => void): number {
		const streams = [...this.eventStreams];
		this.eventStreams.clear();
		for (const entry of streams) {
			cut(entry);
		}

		return streams.length;
	}

	/** False when `entry` was already out: its close was counted once. */
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
