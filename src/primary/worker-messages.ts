/**
 * What each of our messages from a worker does to its record. None reaches a
 * record that is gone: gone waits for the channel to close, and Node emits a
 * channel's last messages before its 'disconnect'.
 */
import {NOTHING_OPEN, openOf, tallyOf, type Open} from '../counts.js';
import type {ToPrimary, WireTally} from '../protocol.js';
import {isPlaced, roleOf, type InflightReport, type WorkerRecord} from './worker-record.js';

/** The record's report after a message with `open` and `tally`: a figure an older helper leaves out keeps its last value. */
function reportOf(record: WorkerRecord, open: Open, message: WireTally & {readonly arrivals?: InflightReport['arrivals']}): InflightReport {
	const last = record.report;
	return {...open, ...tallyOf(message, last), arrivals: message.arrivals ?? last?.arrivals};
}

/** `metrics` is not the fleet's: the metrics room takes it from the 'message' event (primary/metrics.ts). */
export type Handlers = {[K in Exclude<ToPrimary['type'], 'metrics'>]: (record: WorkerRecord, message: Extract<ToPrimary, {type: K}>) => void};

export interface HandlerContext {
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
			record.report = reportOf(record, openOf(message), message);
			if (message.reportId !== undefined) {
				record.reportedNow = message.reportId;
			}
		},
		hooks(record, message) {
			const {state} = record;
			// The long-lived connections were closed as the requests' wait began.
			record.report = reportOf(record, NOTHING_OPEN, message);
			if (isPlaced(state)) {
				record.state = {name: 'hooks', from: state};
			}
		},
		'hook-failed'(record, message) {
			// The worker logged it; the drain counts it (drain.ts).
			record.hooksFailed.push(message.hook);
		},
		drained(record, message) {
			const {state} = record;
			record.report = reportOf(record, NOTHING_OPEN, message);
			if (isPlaced(state)) {
				record.state = {name: 'drained', from: state};
			} else if (state.name === 'hooks') {
				record.state = {name: 'drained', from: state.from};
			}
		},
		heartbeat: (record, message) => {
			const {rssBytes, heapUsedBytes, loopDelayMs, requests, inflight, connectionsAged = 0} = message;
			record.health = {
				at: context.now(),
				rssBytes,
				heapUsedBytes,
				loopDelayMs,
				requests,
				inflight,
				connectionsAged,
				// `--max-event-loop-delay` only.
				...(message.shedding === undefined ? {} : {shed: message.shed, sheddingMs: message.sheddingMs, shedding: message.shedding}),
			};
		},
	};
}
