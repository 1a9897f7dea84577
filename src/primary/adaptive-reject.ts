/**
 * `--adaptive-reject on` during a drain: the rule (arrivals.ts `decide`) every
 * ADAPTIVE_CHECK_MS, and an end only once every worker's figures as of that
 * moment (`report-now`) agree: the reports lag a quarter second, a heartbeat
 * up to a second.
 */
import type {Clock} from '../clock.js';
import type {Timeline} from '../timeline.js';
import {LOOP_SAMPLE_MS} from '../protocol.js';
import {decide, REPORT_LAG_MS, STALE_REPORT_MS, type AdaptiveDecision, type ArrivalFigures} from './arrivals.js';
import type {Fleet} from './fleet.js';
import {isAttached, uncovered, type WorkerRecord} from './worker-record.js';

export const ADAPTIVE_CHECK_MS = 250;
/** Workers that have not answered a `report-now` by then: the rule looks again later. */
const CONFIRM_WAIT_MS = 500;

export interface AdaptiveRejectOptions {
	readonly fleet: Fleet;
	readonly clock: Clock;
	readonly timeline: Timeline;
	/** `clock.now()` at the signal. */
	readonly startedAt: number;
	readonly arrivals: () => ArrivalFigures;
	/** Whether the reject phase is still on (not ended, not killing). */
	readonly active: (nowMs: number) => boolean;
	/** The rule, confirmed, ends it now (`nowMs` since the signal). */
	readonly onEnd: (decision: Extract<AdaptiveDecision, {end: true}>, nowMs: number) => void;
}

export class AdaptiveReject {
	/** The last look: every worker was asked for its figures as of `atMs` (since the signal). */
	private confirming: {readonly id: number; readonly atMs: number} | undefined;
	private requests = 0;

	constructor(private readonly options: AdaptiveRejectOptions) {}

	readonly check = (): void => {
		const {clock, fleet, timeline, startedAt} = this.options;
		const nowMs = clock.now() - startedAt;
		if (!this.options.active(nowMs)) {
			return;
		}

		const watched = fleet.alive.filter(record => record.state.name === 'starting' || record.state.name === 'listening');
		// The figures as every worker gave them when asked, once they all have.
		let freshUntilMs: number | undefined;
		const {confirming} = this;
		if (confirming) {
			if (!watched.every(record => (record.reportedNow ?? 0) >= confirming.id)) {
				if (nowMs - confirming.atMs >= CONFIRM_WAIT_MS) {
					this.confirming = undefined;
				}

				return;
			}

			this.confirming = undefined;
			freshUntilMs = confirming.atMs;
		}

		// Without fresh figures, a screen: would the phase end if the reports were complete up to now?
		const decision = decide({
			figures: this.options.arrivals(),
			nowMs,
			rejectStartMs: timeline.servePeriodMs,
			staleWorkers: watched.filter(record => this.isStale(record)).length,
			freshUntilMs: freshUntilMs ?? nowMs,
		});
		if (!decision.end) {
			return;
		}

		if (freshUntilMs === undefined) {
			const id = ++this.requests;
			this.confirming = {id, atMs: nowMs};
			for (const record of watched) {
				fleet.send(record, {type: 'report-now', id});
			}

			return;
		}

		this.options.onEnd(decision, nowMs);
	};

	/** A worker's `inflight`: the answer to the last look makes the rule look again at once. */
	onReport(reportId: number | undefined): void {
		if (this.confirming !== undefined && reportId === this.confirming.id) {
			this.check();
		}
	}

	/**
	 * A worker whose arrivals the rule cannot see: nothing drained, a server it
	 * does not count, no report since the signal yet, or a late heartbeat (it
	 * may hold arrivals it has not told).
	 */
	private isStale(record: WorkerRecord): boolean {
		const {state} = record;
		if (state.name !== 'starting' && state.name !== 'listening') {
			return false;
		}

		// A server nothing counts (not HTTP, left out) may still be sent to.
		if (!isAttached(state) || record.report?.arrivals === undefined || uncovered(record).length > 0) {
			return true;
		}

		const {health} = record;
		// A heartbeat after a blocked loop: its backlog of requests is read after it, and reported later still.
		// The delay is sampled: a stall may read up to one sample short of its length.
		return health === undefined || this.options.clock.now() - health.at > STALE_REPORT_MS || health.loopDelayMs + LOOP_SAMPLE_MS > REPORT_LAG_MS;
	}
}
