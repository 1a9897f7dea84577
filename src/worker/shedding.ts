/**
 * `--max-event-loop-delay`: while the worker's event loop lags more than the limit,
 * its filters answer new requests 503 + `Retry-After` (Mode.SHED) instead of queueing
 * them behind the ones it is already late with. Decided on the heartbeat's 100 ms
 * samples of a timer's lateness (heartbeat.ts), no timer of its own; one log line when
 * an episode starts and one when it ends, never one per request.
 */
import type {Clock} from '../clock.js';
import type {Logger} from '../logger.js';
import type {HeartbeatMessage} from '../protocol.js';

/** What the heartbeat carries of it (protocol.ts `HeartbeatMessage`): running totals, so the primary's counters never go down. */
export type SheddingStats = Required<Pick<HeartbeatMessage, 'shed' | 'sheddingMs' | 'shedding'>>;

export type SheddingEnd = 'recovered' | 'drain' | 'retire';

export class LoadShedding {
	/** `clock.now()` when the current episode began; undefined while not shedding. */
	private since: number | undefined;
	private shedAtStart = 0;
	private pastMs = 0;

	/** `shedCount`: the filters' running total; `apply`: their mode, SHED or SERVING. */
	constructor(readonly maxEventLoopDelayMs: number, private readonly logger: Logger, private readonly clock: Clock, private readonly shedCount: () => number, private readonly apply: (on: boolean) => void) {}

	get active(): boolean {
		return this.since !== undefined;
	}

	/** One sample of the loop's lateness; `serving`: no drain or retire has begun (theirs take precedence). */
	sample(lateMs: number, serving: boolean): void {
		if (!serving) {
			return;
		}

		if (this.since === undefined) {
			if (lateMs > this.maxEventLoopDelayMs) {
				this.since = this.clock.now();
				this.shedAtStart = this.shedCount();
				this.apply(true);
				this.logger.warn({loopDelayMs: Math.round(lateMs), maxEventLoopDelayMs: this.maxEventLoopDelayMs}, 'shedding new requests: the event loop lags more than --max-event-loop-delay');
			}
		} else if (lateMs <= this.maxEventLoopDelayMs) {
			this.end('recovered');
		}
	}

	/** Ends an open episode. A drain or retire sets the filters' mode itself: `apply` is left to it. */
	end(reason: SheddingEnd): void {
		if (this.since === undefined) {
			return;
		}

		const durationMs = Math.round(this.clock.now() - this.since);
		this.pastMs += durationMs;
		this.since = undefined;
		if (reason === 'recovered') {
			this.apply(false);
		}

		this.logger.info({shed: this.shedCount() - this.shedAtStart, durationMs, ...(reason === 'recovered' ? {} : {endedBy: reason})}, 'stopped shedding');
	}

	get stats(): SheddingStats {
		const current = this.since === undefined ? 0 : this.clock.now() - this.since;
		return {shed: this.shedCount(), sheddingMs: Math.round(this.pastMs + current), shedding: this.since !== undefined};
	}
}
