/**
 * `/metrics`: graceful-cluster's own metrics, the primary's process metrics
 * (prefixed `graceful_cluster_primary_` so they never collide with the app's),
 * and the app's metrics from every worker, aggregated (app-metrics.ts).
 * Loaded only with `--metrics`: without it the primary never loads prom-client.
 *
 * A worker that has not answered a scrape within `METRICS_WAIT_MS` (busy,
 * hung) counts with its last values: the scrape is partial, never failed.
 */
import client from 'prom-client';
import {withTimeout} from '../clock.js';
import {TIMELINE_PHASES} from '../timeline.js';
import {sumOpen} from '../counts.js';
import type {Logger} from '../logger.js';
import type {MetricsMessage, ToPrimary} from '../protocol.js';
import {AppMetrics} from './app-metrics.js';
import {drainPhase, type ClusterView} from './status.js';
import {exitReason, inflightOf, isAttached, roleOf, type StartReason, type WorkerRecord} from './worker-record.js';

export const METRICS_WAIT_MS = 2000;
/** How often the primary samples its own event loop's delay (`graceful_cluster_primary_nodejs_eventloop_lag_*`). */
export const PRIMARY_LOOP_SAMPLE_MS = 100;

export const PREFIX = 'graceful_cluster_';
export const PRIMARY_PREFIX = `${PREFIX}primary_`;

type Kind = 'counter' | 'gauge';

/** graceful-cluster's own metrics, names without the prefix; docs/metrics.md's table must say the same (test/unit/docs.test.ts). */
export const METRICS = {
	workers: {type: 'gauge', labels: ['state'], help: 'Live workers by lifecycle state (starting, listening, retiring, hooks, drained, killed); the samples add up to the live workers'},
	workers_desired: {type: 'gauge', labels: [], help: 'Workers the cluster keeps (--workers)'},
	worker_starts_total: {type: 'counter', labels: ['reason'], help: 'Workers started, by reason (initial, crash, hung, memory, requests, reload)'},
	worker_exits_total: {type: 'counter', labels: ['reason'], help: 'Workers gone, by reason (drain, crash, hung, memory, requests, reload, deadline, second-signal, start-failed)'},
	requests_in_flight: {type: 'gauge', labels: [], help: 'Requests the workers are handling (their last report or heartbeat)'},
	requests_rejected_total: {type: 'counter', labels: [], help: 'Requests answered 503 while draining'},
	connections_aged_total: {type: 'counter', labels: [], help: 'Connections closed for their age (--max-connection-age): Connection: close on HTTP/1.1, GOAWAY on HTTP/2'},
	requests_shed_total: {type: 'counter', labels: [], help: 'Requests answered 503 because their worker\'s event loop lagged more than --max-event-loop-delay'},
	shedding_seconds_total: {type: 'counter', labels: [], help: 'Time workers spent shedding new requests (--max-event-loop-delay), summed over workers'},
	workers_shedding: {type: 'gauge', labels: [], help: 'Workers shedding new requests now (--max-event-loop-delay), as of their last heartbeat'},
	connections_open: {type: 'gauge', labels: ['kind'], help: 'Open long-lived connections by kind (upgrade, stream), as the workers last reported them'},
	drain_phase: {type: 'gauge', labels: [], help: '0 serving, then 1 serve, 2 reject, 3 closing, 4 stopping'},
	drain_duration_seconds: {type: 'gauge', labels: [], help: 'How long the drain has lasted, or lasted once finished; 0 before a drain'},
	reloads_total: {type: 'counter', labels: ['result'], help: 'Reloads by result (finished, failed, abandoned)'},
	worker_heartbeat_age_seconds: {type: 'gauge', labels: ['slot', 'role'], help: 'Per worker, seconds since its last heartbeat'},
	worker_event_loop_delay_seconds: {type: 'gauge', labels: ['slot', 'role'], help: 'Per worker, the worst event-loop delay in the second before its last heartbeat: how late a 100 ms timer came (0 at rest; a stall reads within 0.1 s of its length)'},
	worker_rss_bytes: {type: 'gauge', labels: ['slot', 'role'], help: 'Per worker, resident set size from its last heartbeat'},
	metrics_scrape_failures_total: {type: 'counter', labels: [], help: 'Workers that did not send their app metrics within the scrape\'s wait (their last values were used)'},
} as const satisfies Record<string, {type: Kind; labels: readonly string[]; help: string}>;

const WORKER_STATES = ['starting', 'listening', 'retiring', 'hooks', 'drained', 'killed'] as const;
const START_REASONS: readonly StartReason[] = ['initial', 'crash', 'hung', 'memory', 'requests', 'reload'];
const EXIT_REASONS = ['drain', 'crash', 'hung', 'memory', 'requests', 'reload', 'deadline', 'second-signal', 'start-failed'] as const;

const metricName = (name: keyof typeof METRICS): string => PREFIX + name;

export class ClusterMetrics {
	readonly registry = new client.Registry();
	private readonly app = new AppMetrics();
	private readonly fleet: ClusterView['fleet'];
	private readonly restarts = new Map<number, number>();
	private readonly totals: RunningTotal[] = [];
	private readonly waiting = new Map<number, () => void>();
	private nextId = 1;
	private readonly starts: client.Counter;
	private readonly exits: client.Counter;
	private readonly scrapeFailures: client.Counter;

	constructor(private readonly view: () => ClusterView, private readonly logger: Logger, private readonly waitMs = METRICS_WAIT_MS) {
		const {registry} = this;
		this.fleet = view().fleet;
		// Sampled every 100 ms, not prom-client's 10: a hundred wake-ups a second
		// cost the primary 8 ms of CPU a second at rest (bench/idle-cpu.js).
		client.collectDefaultMetrics({register: registry, prefix: PRIMARY_PREFIX, eventLoopMonitoringPrecision: PRIMARY_LOOP_SAMPLE_MS});
		const self = this;
		const gauge = (name: keyof typeof METRICS, collect: (this: client.Gauge) => void): client.Gauge => new client.Gauge({
			name: metricName(name), help: METRICS[name].help, labelNames: [...METRICS[name].labels], registers: [registry], collect,
		});
		const counter = (name: keyof typeof METRICS, collect?: (this: client.Counter) => void): client.Counter => new client.Counter({
			name: metricName(name), help: METRICS[name].help, labelNames: [...METRICS[name].labels], registers: [registry], ...(collect ? {collect} : {}),
		});

		gauge('workers', function () {
			const counts = Object.fromEntries(WORKER_STATES.map(state => [state, 0])) as Record<string, number>;
			for (const record of self.fleet.alive) {
				// fleet.alive holds no worker that is gone.
				counts[record.state.name] = (counts[record.state.name] ?? 0) + 1;
			}

			for (const [state, count] of Object.entries(counts)) {
				this.set({state}, count);
			}
		});
		gauge('workers_desired', function () {
			this.set(self.view().options.workers);
		});
		this.starts = counter('worker_starts_total');
		this.exits = counter('worker_exits_total');
		for (const reason of START_REASONS) {
			this.starts.inc({reason}, 0);
		}

		for (const reason of EXIT_REASONS) {
			this.exits.inc({reason}, 0);
		}

		gauge('requests_in_flight', function () {
			this.set(self.fleet.alive.reduce((sum, record) => sum + inflightOf(record), 0));
		});
		// Rejections come in drain reports; aged connections and shedding in heartbeats.
		this.totals.push(
			new RunningTotal(counter('requests_rejected_total'), record => record.report?.rejected),
			new RunningTotal(counter('connections_aged_total'), record => record.health?.connectionsAged),
			new RunningTotal(counter('requests_shed_total'), record => record.health?.shed),
			new RunningTotal(counter('shedding_seconds_total'), record => (record.health?.sheddingMs === undefined ? undefined : record.health.sheddingMs / 1000)),
		);
		gauge('workers_shedding', function () {
			this.set(self.fleet.alive.filter(record => record.health?.shedding === true).length);
		});
		gauge('connections_open', function () {
			const {upgrades, streams} = sumOpen(self.fleet.alive.map(record => record.report));
			this.set({kind: 'upgrade'}, upgrades);
			this.set({kind: 'stream'}, streams);
		});
		gauge('drain_phase', function () {
			this.set(TIMELINE_PHASES.indexOf(drainPhase(self.view())));
		});
		gauge('drain_duration_seconds', function () {
			const {drain, clock} = self.view();
			this.set(drain ? (drain.durationMs ?? (clock.now() - drain.startedAt)) / 1000 : 0);
		});
		counter('reloads_total', function () {
			// Read from the primary's own count: set, not added to.
			this.reset();
			for (const [result, count] of Object.entries(self.view().reloads)) {
				this.inc({result}, count);
			}
		});
		const perWorker = (name: keyof typeof METRICS, read: (record: WorkerRecord, now: number) => number | undefined): void => {
			gauge(name, function () {
				this.reset();
				const now = self.view().clock.now();
				const seen = new Set<string>();
				for (const record of self.fleet.alive) {
					const value = read(record, now);
					const labels = {slot: String(record.slot), role: roleOf(record.state)};
					const key = `${labels.slot}/${labels.role}`;
					// Two workers of one slot and role (a slot reloaded twice in a row): one series, the newest.
					if (value !== undefined && !seen.has(key)) {
						seen.add(key);
						this.set(labels, value);
					}
				}
			});
		};

		perWorker('worker_heartbeat_age_seconds', (record, now) => (record.health ? (now - record.health.at) / 1000 : undefined));
		perWorker('worker_event_loop_delay_seconds', record => (record.health ? record.health.loopDelayMs / 1000 : undefined));
		perWorker('worker_rss_bytes', record => record.health?.rssBytes);
		this.scrapeFailures = counter('metrics_scrape_failures_total');

		this.fleet.on('forked', this.onForked);
		this.fleet.on('message', this.onMessage);
		this.fleet.on('gone', this.onGone);
	}

	restartsOf = (slot: number): number => this.restarts.get(slot) ?? 0;

	private readonly collisions = new Set<string>();

	/** False for an app metric named with our prefix: two series of one name would make the whole scrape invalid. */
	private isAppsOwn(name: string): boolean {
		if (!name.startsWith(PREFIX)) {
			return true;
		}

		if (!this.collisions.has(name)) {
			this.collisions.add(name);
			this.logger.warn({metric: name, prefix: PREFIX}, 'an app metric uses graceful-cluster\'s prefix; it is left out of /metrics: rename it');
		}

		return false;
	}

	async scrape(): Promise<string> {
		await this.askWorkers();
		const own = await this.registry.metrics();
		let app = '';
		try {
			const snapshot = this.app.snapshot();
			if (snapshot.length > 0) {
				const aggregated = client.AggregatorRegistry.aggregate(snapshot.map(metrics => metrics.filter(metric => this.isAppsOwn(metric.name))) as never);
				app = await aggregated.metrics();
			}
		} catch (error) {
			// The app's metrics must never take ours down with them.
			this.logger.warn({err: error}, 'could not aggregate the app\'s metrics; serving graceful-cluster\'s own');
		}

		return own + (app === '' ? '' : `\n${app}`);
	}

	/**
	 * Only the workers whose app attached: one just forked may not listen on IPC
	 * yet, and a request it never reads would hold every scrape for the whole
	 * wait; an app that never attached has no metrics to give.
	 */
	private async askWorkers(): Promise<void> {
		const asked: Array<Promise<boolean>> = [];
		const {clock} = this.view();
		for (const record of this.fleet.alive) {
			if (!record.handle.isConnected() || record.state.name === 'killed' || !isAttached(record.state)) {
				continue;
			}

			const id = this.nextId++;
			const answered = new Promise<boolean>(resolve => {
				this.waiting.set(id, () => {
					resolve(true);
				});
			});
			asked.push(withTimeout(answered, this.waitMs, () => false, clock).finally(() => {
				this.waiting.delete(id);
			}));
			this.fleet.send(record, {type: 'metrics-request', id});
		}

		const answered = await Promise.all(asked);
		const failures = answered.filter(ok => !ok).length;
		if (failures > 0) {
			this.scrapeFailures.inc(failures);
		}
	}

	private readonly onForked = (record: WorkerRecord): void => {
		this.starts.inc({reason: record.startReason});
		if (record.startReason !== 'initial') {
			this.restarts.set(record.slot, this.restartsOf(record.slot) + 1);
		}
	};

	private readonly onMessage = (record: WorkerRecord, message: ToPrimary): void => {
		if (message.type === 'metrics') {
			this.onMetrics(record, message);
			return;
		}

		for (const total of this.totals) {
			total.update(record);
		}
	};

	private onMetrics(record: WorkerRecord, message: MetricsMessage): void {
		this.app.update(record.id, message.metrics);
		this.waiting.get(message.id)?.();
	}

	private readonly onGone = (record: WorkerRecord): void => {
		this.exits.inc({reason: record.state.name === 'gone' ? exitReason(record.state, {draining: this.view().drain !== undefined, leftForBasicDrain: record.leftForBasicDrain}) : 'crash'});
		this.app.leave(record.id);
		for (const total of this.totals) {
			total.forget(record);
		}
	};
}

/** A counter fed by a running total per worker: each worker's new part is added once. */
class RunningTotal {
	private readonly seen = new Map<WorkerRecord, number>();

	constructor(private readonly counter: client.Counter, private readonly read: (record: WorkerRecord) => number | undefined) {}

	update(record: WorkerRecord): void {
		const total = this.read(record);
		const seen = this.seen.get(record) ?? 0;
		if (total !== undefined && total > seen) {
			this.counter.inc(total - seen);
			this.seen.set(record, total);
		}
	}

	forget(record: WorkerRecord): void {
		this.seen.delete(record);
	}
}
