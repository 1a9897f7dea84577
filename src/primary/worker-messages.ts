/**
 * What each of graceful-cluster's messages from a worker does to its record
 * (worker-record.ts), by type: the fleet applies it (fleet.ts `onMessage`).
 * None reaches a record that is gone: gone waits for the channel to close, and
 * Node emits a channel's last messages before its 'disconnect'.
 */
import type {Aborted, LongLivedEnds, ToPrimary} from '../protocol.js';
import {isPlaced, roleOf, type InflightReport, type WorkerRecord} from './worker-record.js';

/** A message's counts that came in later versions; an older helper sends none: the last known ones stay. */
function laterCounts(message: Aborted & LongLivedEnds, last: InflightReport | undefined): Pick<InflightReport, 'aborted' | 'closedLongLived' | 'longLivedCut'> {
	return {
			aborted: message.aborted ?? last?.aborted ?? 0,
			closedLongLived: message.closedLongLived ?? last?.closedLongLived ?? 0,
			longLivedCut: message.longLivedCut ?? last?.longLivedCut ?? 0,
		};
	}

	/** `metrics` is not the fleet's: the metrics room takes it from the 'message' event (primary/metrics.ts). */
	export type Handlers = {[K in Exclude<ToPrimary['type'], 'metrics'>]: (record: WorkerRecord, message: Extract<ToPrimary, {type: K}>) => void};


	export interface HandlerContext {
		/** The fleet's clock. */
		now(): number;
		/** The worker listens on `where` (node:cluster does not say, for `listening-apart`). */
		listened(record: WorkerRecord, where: string): void;
	}

	export function messageHandlers(context: HandlerContext): Handlers {
		return {
		attached(record, message) {
			const {state} = record;
			if (isPlaced(state)) {
				record.state = {...state, attached: true};
			}

			if (message.warming && roleOf(state) === 'candidate') {
				record.warmup = {name: 'warming', failures: []};
			}
		},
		'not-ready'(record, message) {
			if (record.warmup.name === 'warming') {
				record.warmup = {name: 'warming', failures: message.failures};
			}
		},
		ready: record => {
			if (record.warmup.name === 'warming') {
				record.warmup = {name: 'ready', at: context.now()};
			}
		},
		'listening-apart': (record, message) => {
			context.listened(record, message.address);
		},
		covers(record, message) {
			if (message.drained === false) {
				record.covered.delete(message.address);
			} else {
				record.covered.add(message.address);
			}
		},
		notice() {
			// For the operator, once: the primary's (index.ts).
		},
		inflight(record, message) {
			record.report = {inflight: message.inflight, served: message.served, rejected: message.rejected, upgrades: message.upgrades, streams: message.streams, ...laterCounts(message, record.report), arrivals: message.arrivals ?? record.report?.arrivals};
			if (message.reportId !== undefined) {
				record.reportedNow = message.reportId;
			}
		},
		hooks(record, message) {
			const {state} = record;
			const summary = {served: message.served, rejected: message.rejected};
			// The long-lived connections were closed as the requests' wait began.
			record.report = {inflight: 0, ...summary, upgrades: 0, streams: 0, ...laterCounts(message, record.report), arrivals: message.arrivals ?? record.report?.arrivals};
			if (isPlaced(state)) {
				record.state = {name: 'hooks', summary, from: state};
			}
		},
		'hook-failed'(record, message) {
			// The worker logged it; the drain counts it (drain.ts).
			record.hooksFailed.push(message.hook);
		},
		drained(record, message) {
			const {state} = record;
			const summary = {served: message.served, rejected: message.rejected, durationMs: message.durationMs, closedLongLived: message.closedLongLived};
			record.report = {inflight: 0, served: message.served, rejected: message.rejected, upgrades: 0, streams: 0, ...laterCounts(message, record.report), arrivals: message.arrivals ?? record.report?.arrivals};
			if (isPlaced(state)) {
				record.state = {name: 'drained', summary, from: state};
			} else if (state.name === 'hooks') {
				record.state = {name: 'drained', summary, from: state.from};
			}
		},
		heartbeat: (record, message) => {
			record.health = {
				at: context.now(),
				rssBytes: message.rssBytes,
				heapUsedBytes: message.heapUsedBytes,
				loopDelayMs: message.loopDelayMs,
				requests: message.requests,
				inflight: message.inflight,
			};
		},
	};
}
