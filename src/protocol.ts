/**
 * Every IPC message graceful-cluster sends, in one place. The app shares the
 * IPC channel with us, so each of our messages sits in an envelope keyed
 * `gracefulCluster`, the way Node's cluster module tags its own `cmd:
 * 'NODE_CLUSTER'`; anything without it is the app's. The envelope carries a
 * version because the CLI and the app's copy of the helper can differ.
 */
import {isArrivalsReport, MAX_ARRIVAL_PEERS, MAX_ARRIVAL_SECONDS, type ArrivalsReport} from './arrivals-report.js';
import {TALLY_FIELDS, type Open, type Tally} from './counts.js';
import {isMetricsJson, MAX_METRIC_VALUES, MAX_METRICS, type MetricJson} from './metrics-json.js';

export const PROTOCOL_VERSION = 1;
const KEY = 'gracefulCluster';

/**
 * Worker -> primary as an exit code: an app listener failed after the worker was
 * disconnected, when `hook-failed` could no longer be sent. A failed hook, not a lost worker.
 */
export const UNSENT_HOOK_FAILURE_EXIT = 7;

/** Primary -> worker: the signal arrived. Durations count from the moment the worker reads this. */
export interface DrainMessage {
	readonly type: 'drain';
	readonly servePeriodMs: number;
	readonly rejectPeriodMs: number;
	readonly gracePeriodMs: number;
	/** The signal the primary received: the app's own listeners for it run at the drain's end (worker/signal-listeners.ts). */
	readonly signal?: string;
	/** Epoch ms: the worker times its arrivals from it, not from when a busy event loop let it read this. */
	readonly signalAt?: number;
}

/** Primary -> worker: a replacement is listening, so leave quietly, with no 503: the other workers are there. */
export interface RetireMessage {
	readonly type: 'retire';
	/** Keep idle keep-alive connections this long for their next request before closing them. */
	readonly lingerMs: number;
	/** The signal that started the reload (SIGHUP, SIGUSR2); absent for a recycle. */
	readonly signal?: string;
	/** True when the worker is a replacement that was not ready in time: it leaves, the old one stays. */
	readonly notReady?: boolean;
}

/** Worker -> primary: for the operator, once for the whole cluster (socket.io's long-polling needs sticky sessions). */
export interface NoticeMessage {
	readonly type: 'notice';
	readonly code: NoticeCode;
}

export const NOTICE_CODES = ['socket.io-polling'] as const;
export type NoticeCode = (typeof NOTICE_CODES)[number];

/** Worker -> primary: the app called `attach()`, so this worker drains itself. */
export interface AttachedMessage {
	readonly type: 'attached';
	/** From a replacement (worker/warmup.ts): it takes no connections until it sends `ready`; the old worker retires only then. */
	readonly warming?: boolean;
}

/** Worker -> primary, from a warming replacement, when its failing readiness checks change. */
export interface NotReadyMessage {
	readonly type: 'not-ready';
	/** `name: why`, one per failing check (worker/readiness.ts). */
	readonly failures: readonly string[];
}

export interface ReadyMessage {
	readonly type: 'ready';
}

/** Worker -> primary: a drained server listens on `address` (a port, or a socket's path); `drained: false`, not any more (`exclude()`). */
export interface CoversMessage {
	readonly type: 'covers';
	readonly address: string;
	readonly drained?: boolean;
}

/** Worker -> primary: a server listens without node:cluster (`exclusive: true`), which then tells the primary nothing. */
export interface ListeningApartMessage {
	readonly type: 'listening-apart';
	readonly address: string;
}

/** `served` and `rejected` in every version; a figure added later is optional (the primary keeps its last known value). */
export type WireTally = Pick<Tally, FirstTally> & Partial<Omit<Tally, FirstTally>>;
const FIRST_TALLY = ['served', 'rejected'] as const;
type FirstTally = (typeof FIRST_TALLY)[number];

/** Worker -> primary, during a drain, throttled: what is open and what was counted so far (counts.ts). */
export interface InflightMessage extends Open, WireTally {
	readonly type: 'inflight';
	readonly arrivals?: ArrivalsReport;
	/** From a retired worker when a drain's signal reaches it: its counts then, which the drain counts from. */
	readonly atSignal?: boolean;
	/** With `atSignal`: its hooks that had failed by then (a `hook-failed` may still be on its way). */
	readonly hooksFailed?: number;
	/** The answer to a `report-now` with this id. */
	readonly reportId?: number;
}

/** Worker -> primary: every request is done; acknowledged before the first hook runs, so a hook's `process.exit()` loses nothing. */
export interface HooksMessage extends WireTally {
	readonly type: 'hooks';
	/** The arrivals' figures as the hooks start: a hook's `process.exit()` leaves no later report. */
	readonly arrivals?: ArrivalsReport;
}

/** Worker -> primary: a hook or app signal listener threw or rejected; acknowledged before the next one runs. */
export interface HookFailedMessage {
	readonly type: 'hook-failed';
	readonly hook: string;
}

/** Worker -> primary: nothing in flight, hooks ran, about to exit. */
export interface DrainedMessage extends WireTally {
	readonly type: 'drained';
	readonly durationMs: number;
	readonly closedLongLived: number;
	/** Each also told in a `hook-failed` message. */
	readonly hooksFailed?: number;
	/** The arrivals' last figures (the last `inflight` report may be older); absent after a retire. */
	readonly arrivals?: ArrivalsReport;
}

/** What a worker's drain did: its `worker drained` line, and its `drained` message. */
export interface DrainSummary extends Tally {
	readonly durationMs: number;
	readonly hooksFailed: number;
}

export const HEARTBEAT_INTERVAL_MS = 1000;

/**
 * A stall shows within one period of its length, read against half a second
 * by the adaptive reject end (primary/arrivals.ts REPORT_LAG_MS). A 20 ms
 * sample cost each idle worker about 3.5 ms of CPU a second more
 * (bench/idle-cpu.js, side by side with `--cli`).
 */
export const LOOP_SAMPLE_MS = 100;

/** Worker -> primary, every second, from the main event loop: a blocked loop stops it (a worker thread would keep beating). */
export interface HeartbeatMessage {
	readonly type: 'heartbeat';
	readonly rssBytes: number;
	readonly heapUsedBytes: number;
	/** The longest event-loop delay since the last heartbeat (monitorEventLoopDelay's max), rounded. */
	readonly loopDelayMs: number;
	/** Requests handed to the app since the worker started; 0 with nothing drained. */
	readonly requests: number;
	/** Requests the app is handling now; 0 with nothing drained. */
	readonly inflight: number;
	/** Connections it closed for their age (`--max-connection-age`) since it started; absent while 0, and from an older helper. */
	readonly connectionsAged?: number;
	/** With `--max-event-loop-delay`: requests answered 503 by shedding since the worker started. */
	readonly shed?: number;
	/** With `--max-event-loop-delay`: time spent shedding since the worker started, ms. */
	readonly sheddingMs?: number;
	/** With `--max-event-loop-delay`: shedding now. */
	readonly shedding?: boolean;
}

/** Not an IPC message: the stack-capture thread writes it to stderr, since the IPC channel belongs to the blocked thread. */
export const HUNG_STACK_MESSAGE = 'worker event loop blocked: its JavaScript stack';

/** Primary -> worker: a scrape wants the app's metrics; answered with a `metrics` message of the same `id`. */
export interface MetricsRequestMessage {
	readonly type: 'metrics-request';
	readonly id: number;
}

/** Worker -> primary: `getMetricsAsJSON()`. `id` 0: unasked, the final values of a worker leaving on purpose. */
export interface MetricsMessage {
	readonly type: 'metrics';
	readonly id: number;
	readonly metrics: readonly MetricJson[];
}

export type LeaveMessage = DrainMessage | RetireMessage;
/** Primary -> a warming replacement: no other worker serves any more, so take connections now, ready or not. */
export interface ServeNowMessage {
	readonly type: 'serve-now';
}

/** Primary -> worker: the load balancers have stopped sending (`--adaptive-reject on`); end the reject phase now. */
export interface EndRejectMessage {
	readonly type: 'end-reject';
}

/** Primary -> worker: answered at once with an `inflight` carrying `reportId`, so the adaptive end is decided on figures complete up to now. */
export interface ReportNowMessage {
	readonly type: 'report-now';
	readonly id: number;
}

/** Primary -> worker (`--max-event-loop-delay`): whether every worker sheds now; a shedding worker's readiness probe answers 503 while they all do. */
export interface SheddingMessage {
	readonly type: 'shedding';
	readonly all: boolean;
}

export type ToWorker = LeaveMessage | MetricsRequestMessage | ServeNowMessage | EndRejectMessage | ReportNowMessage | SheddingMessage;
export type {ArrivalsReport} from './arrivals-report.js';
export type ToPrimary = AttachedMessage | NotReadyMessage | ReadyMessage | NoticeMessage | CoversMessage | ListeningApartMessage | InflightMessage | HooksMessage | HookFailedMessage | DrainedMessage | MetricsMessage | HeartbeatMessage;
export type Message = ToWorker | ToPrimary;

/** Every message type, by direction: a type left out of these is a compile error. */
const TO_WORKER_TYPES: Readonly<Record<ToWorker['type'], true>> = {drain: true, retire: true, 'metrics-request': true, 'serve-now': true, 'end-reject': true, 'report-now': true, shedding: true};
const TO_PRIMARY_TYPES: Readonly<Record<ToPrimary['type'], true>> = {attached: true, 'not-ready': true, ready: true, notice: true, covers: true, 'listening-apart': true, inflight: true, hooks: true, 'hook-failed': true, drained: true, metrics: true, heartbeat: true};
export const TO_WORKER = Object.keys(TO_WORKER_TYPES) as ReadonlyArray<ToWorker['type']>;
export const TO_PRIMARY = Object.keys(TO_PRIMARY_TYPES) as ReadonlyArray<ToPrimary['type']>;

export function envelope(message: Message): Record<string, unknown> {
	return {[KEY]: {v: PROTOCOL_VERSION, ...message}};
}

export type Parsed<T> =
	| {readonly kind: 'ours'; readonly message: T}
	| {readonly kind: 'foreign'}
	| {readonly kind: 'invalid'; readonly reason: string};

/** A field's kind; `?`: it may be absent (added later: the other side may be an older copy). */
type FieldKind = keyof KindTypes;
interface KindTypes {
	count: number;
	text: string;
	texts: readonly string[];
	notice: NoticeCode;
	metrics: readonly MetricJson[];
	flag: boolean;
	'count?': number;
	'signal?': string;
	'flag?': boolean;
	'time?': number;
	'arrivals?': ArrivalsReport;
}

/** The kinds that fit field `K` of `M`: its type, and `?` exactly where it is optional. */
type KindsFor<M, K extends keyof M> = {
	// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- `{} extends Pick<M, K>` holds exactly when K is optional
	[Kind in FieldKind]: (Kind extends `${string}?` ? true : false) extends ({} extends Pick<M, K> ? true : false)
		? (NonNullable<M[K]> extends KindTypes[Kind] ? Kind : never)
		: never;
}[FieldKind];
/** A message's validator: every field of its interface, each with a kind that fits, and nothing else. */
type Validator<M> = {readonly [K in Exclude<keyof M, 'type'>]-?: KindsFor<M, K>};

/** The most `texts` one message may carry: failing readiness checks. */
export const MAX_TEXTS = 32;
const SIGNAL = /^SIG[A-Z0-9]{2,10}$/;

const CHECKS: Record<FieldKind, {readonly test: (value: unknown) => boolean; readonly expected: string}> = {
	count: {test: value => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0, expected: 'a non-negative integer'},
	text: {test: value => typeof value === 'string' && value.length <= 4096, expected: 'a string of at most 4096 characters'},
	notice: {test: value => (NOTICE_CODES as readonly unknown[]).includes(value), expected: `one of ${NOTICE_CODES.join(', ')}`},
	texts: {test: value => Array.isArray(value) && value.length <= MAX_TEXTS && value.every(item => CHECKS.text.test(item)), expected: `an array of at most ${MAX_TEXTS} strings`},
	metrics: {test: isMetricsJson, expected: `prom-client's getMetricsAsJSON() result (at most ${MAX_METRICS} metrics, ${MAX_METRIC_VALUES} values)`},
	flag: {test: value => typeof value === 'boolean', expected: 'a boolean'},
	'count?': {test: value => value === undefined || CHECKS.count.test(value), expected: 'absent or a non-negative integer'},
	'arrivals?': {test: value => value === undefined || isArrivalsReport(value), expected: `absent or arrivals (at most ${MAX_ARRIVAL_SECONDS} seconds, ${MAX_ARRIVAL_PEERS} peers)`},
	'time?': {test: value => value === undefined || (typeof value === 'number' && Number.isFinite(value) && value > 0), expected: 'absent or a time in epoch milliseconds'},
	'flag?': {test: value => value === undefined || typeof value === 'boolean', expected: 'absent or a boolean'},
	'signal?': {test: value => value === undefined || (typeof value === 'string' && SIGNAL.test(value)), expected: 'absent or a signal name'},
};

const OPEN_KINDS: Validator<Open> = {inflight: 'count', upgrades: 'count', streams: 'count'};
const TALLY_KINDS = Object.fromEntries(TALLY_FIELDS.map(field => [field, (FIRST_TALLY as readonly string[]).includes(field) ? 'count' : 'count?'])) as Validator<WireTally>;
const FIELDS: {readonly [T in Message['type']]: Validator<Extract<Message, {type: T}>>} = {
	drain: {servePeriodMs: 'count', rejectPeriodMs: 'count', gracePeriodMs: 'count', signal: 'signal?', signalAt: 'time?'},
	retire: {lingerMs: 'count', signal: 'signal?', notReady: 'flag?'},
	attached: {warming: 'flag?'},
	'not-ready': {failures: 'texts'},
	ready: {},
	notice: {code: 'notice'},
	covers: {address: 'text', drained: 'flag?'},
	'listening-apart': {address: 'text'},
	inflight: {...OPEN_KINDS, ...TALLY_KINDS, arrivals: 'arrivals?', atSignal: 'flag?', hooksFailed: 'count?', reportId: 'count?'},
	hooks: {...TALLY_KINDS, arrivals: 'arrivals?'},
	'hook-failed': {hook: 'text'},
	drained: {...TALLY_KINDS, closedLongLived: 'count', durationMs: 'count', hooksFailed: 'count?', arrivals: 'arrivals?'},
	'metrics-request': {id: 'count'},
	'serve-now': {},
	'end-reject': {},
	'report-now': {id: 'count'},
	shedding: {all: 'flag'},
	metrics: {id: 'count', metrics: 'metrics'},
	heartbeat: {rssBytes: 'count', heapUsedBytes: 'count', loopDelayMs: 'count', requests: 'count', inflight: 'count', connectionsAged: 'count?', shed: 'count?', sheddingMs: 'count?', shedding: 'flag?'},
};

/** Never throws, whatever the app sends: a primary that crashes on a bad message would drop every request. */
export function parseMessage<T extends Message>(raw: unknown, accept: ReadonlyArray<T['type']>): Parsed<T> {
	if (typeof raw !== 'object' || raw === null || !Object.hasOwn(raw, KEY)) {
		return {kind: 'foreign'};
	}

	const body = (raw as Record<string, unknown>)[KEY];
	if (typeof body !== 'object' || body === null) {
		return {kind: 'invalid', reason: 'envelope is not an object'};
	}

	const {v, type} = body as Record<string, unknown>;
	if (v !== PROTOCOL_VERSION) {
		return {kind: 'invalid', reason: `protocol version ${String(v)}, expected ${PROTOCOL_VERSION}: the app's graceful-cluster and the CLI's differ, install one version`};
	}

	if (typeof type !== 'string' || !(accept as readonly string[]).includes(type)) {
		return {kind: 'invalid', reason: `unexpected message type ${JSON.stringify(type)?.slice(0, 40)}`};
	}

	for (const [field, kind] of Object.entries(FIELDS[type as Message['type']]) as Array<[string, FieldKind]>) {
		if (!CHECKS[kind].test((body as Record<string, unknown>)[field])) {
			return {kind: 'invalid', reason: `${type}.${field} is not ${CHECKS[kind].expected}`};
		}
	}

	return {kind: 'ours', message: body as T};
}
