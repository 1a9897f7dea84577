// /metrics and /status without processes: the app's metrics aggregated as
// prom-client does, counters that never go down, the scrape's bounded wait, and
// graceful-cluster's own metrics following the fleet (fake workers, fake clock).
import test from 'ava';
import client from 'prom-client';
import {parseMetricsAddress} from '../../src/values.js';
import {AppMetrics} from '../../src/primary/app-metrics.js';
import {Primary} from '../../src/primary/index.js';
import {DEFAULT_PRIMARY_OPTIONS, type PrimaryOptions} from '../../src/primary/options.js';
import {chooseLogFormat, PrettySink, prettyLine, prettySink} from '../../src/primary/log-format.js';
import {ClusterMetrics, METRICS_WAIT_MS} from '../../src/primary/metrics.js';
import {clusterStatus} from '../../src/primary/status.js';
import {MAX_METRICS, type MetricJson} from '../../src/metrics-json.js';
import {envelope, parseMessage, type ToPrimary} from '../../src/protocol.js';
import {DEFAULT_SETTINGS} from '../../src/settings.js';
import {captureLogger, fakeEdges, type FakeWorker} from '../helpers/fakes.js';

/** One worker's registry, as the app would have it, in the JSON the worker sends. */
async function workerRegistry(hits: number, busy: number, lag = 0.01): Promise<MetricJson[]> {
	const register = new client.Registry();
	new client.Counter({name: 'app_hits_total', help: 'hits', labelNames: ['route'], registers: [register]}).inc({route: '/'}, hits);
	new client.Gauge({name: 'app_busy', help: 'busy', registers: [register]}).set(busy);
	new client.Gauge({name: 'app_lag_seconds', help: 'lag', aggregator: 'average', registers: [register]}).set(lag);
	const histogram = new client.Histogram({name: 'app_latency_seconds', help: 'latency', buckets: [0.1, 1], registers: [register]});
	for (let i = 0; i < hits; i++) {
		histogram.observe(0.05);
	}

	// Through JSON, as over IPC.
	return JSON.parse(JSON.stringify(await register.getMetricsAsJSON())) as MetricJson[];
}

async function aggregated(app: AppMetrics): Promise<string> {
	return client.AggregatorRegistry.aggregate(app.snapshot() as never).metrics();
}

const sample = (text: string, series: string): number | undefined => {
	const line = text.split('\n').find(candidate => candidate.startsWith(`${series} `));
	return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

test('the app\'s metrics: counters and histograms summed exactly, each metric\'s aggregator respected', async t => {
	const app = new AppMetrics();
	app.update(1, await workerRegistry(3, 1, 0.01));
	app.update(2, await workerRegistry(4, 1, 0.03));
	const text = await aggregated(app);
	t.is(sample(text, 'app_hits_total{route="/"}'), 7);
	t.is(sample(text, 'app_busy'), 2, 'a gauge: summed by default');
	t.is(sample(text, 'app_lag_seconds'), 0.02, 'aggregator: average');
	t.is(sample(text, 'app_latency_seconds_count'), 7);
	t.is(sample(text, 'app_latency_seconds_bucket{le="0.1"}'), 7);
});

test('counters never go down: a worker that leaves keeps its counts in the sum, its gauges go', async t => {
	const app = new AppMetrics();
	app.update(1, await workerRegistry(10, 1));
	app.update(2, await workerRegistry(5, 1));
	t.is(sample(await aggregated(app), 'app_hits_total{route="/"}'), 15);
	// Worker 1 crashes; its replacement starts from 0.
	app.leave(1);
	app.update(3, await workerRegistry(0, 1));
	let text = await aggregated(app);
	t.is(sample(text, 'app_hits_total{route="/"}'), 15, 'not lower after the crash');
	t.is(sample(text, 'app_latency_seconds_count'), 15);
	t.is(sample(text, 'app_busy'), 2, 'the gone worker\'s gauge is not counted');
	// A reload replaces both, each sending its final values first.
	app.update(2, await workerRegistry(6, 1));
	app.update(3, await workerRegistry(2, 1));
	app.leave(2);
	app.leave(3);
	app.update(4, await workerRegistry(1, 1));
	text = await aggregated(app);
	t.is(sample(text, 'app_hits_total{route="/"}'), 10 + 6 + 2 + 1);
	// Every worker gone: the counters stay.
	app.leave(4);
	t.is(sample(await aggregated(app), 'app_hits_total{route="/"}'), 19);
	t.is(sample(await aggregated(app), 'app_busy'), undefined);
});

test('protocol: a metrics answer is validated; NaN (null through JSON) is accepted, a huge or malformed one is not', t => {
	const accept: Array<ToPrimary['type']> = ['metrics'];
	const ok = {type: 'metrics', id: 3, metrics: [{name: 'a_total', help: 'h', type: 'counter', aggregator: 'sum', values: [{value: null, labels: {}}]}]};
	t.is(parseMessage(envelope(ok as never), accept).kind, 'ours');
	const bad: unknown[] = [
		{type: 'metrics', id: 1, metrics: 'x'},
		{type: 'metrics', id: 1, metrics: [{name: 'bad name', help: '', type: 'counter', aggregator: 'sum', values: []}]},
		{type: 'metrics', id: 1, metrics: [{name: 'a', help: '', type: 'widget', aggregator: 'sum', values: []}]},
		{type: 'metrics', id: 1, metrics: [{name: 'a', help: '', type: 'gauge', aggregator: 'median', values: []}]},
		{type: 'metrics', id: 1, metrics: [{name: 'a', help: '', type: 'gauge', aggregator: 'sum', values: [{value: '1', labels: {}}]}]},
		{type: 'metrics', id: 1, metrics: Array.from({length: MAX_METRICS + 1}, (_, i) => ({name: `m${i}`, help: '', type: 'gauge', aggregator: 'sum', values: []}))},
		{type: 'metrics', id: -1, metrics: []},
	];
	for (const message of bad) {
		t.is(parseMessage(envelope(message as never), accept).kind, 'invalid');
	}
});

test('--metrics takes a port or host:port', t => {
	t.deepEqual(parseMetricsAddress('9091'), {host: undefined, port: 9091});
	t.deepEqual(parseMetricsAddress('127.0.0.1:9091'), {host: '127.0.0.1', port: 9091});
	t.deepEqual(parseMetricsAddress('[::1]:9091'), {host: '::1', port: 9091});
	for (const bad of ['', 'abc', '0', '70000', '127.0.0.1:', ':9091', '9091:127.0.0.1']) {
		t.throws(() => parseMetricsAddress(bad), {message: /--metrics \(GRACEFUL_CLUSTER_METRICS\)/}, bad);
	}
});

test('--log-format: JSON unless stdout is a terminal; NO_COLOR keeps pretty but drops the colour', t => {
	t.deepEqual(chooseLogFormat(undefined, false, {}), {format: 'json', colorize: false});
	t.deepEqual(chooseLogFormat(undefined, true, {}), {format: 'pretty', colorize: true});
	t.deepEqual(chooseLogFormat(undefined, true, {NO_COLOR: '1'}), {format: 'pretty', colorize: false});
	t.deepEqual(chooseLogFormat('json', true, {}), {format: 'json', colorize: false});
	t.deepEqual(chooseLogFormat('pretty', false, {}), {format: 'pretty', colorize: false});
});

test('pretty: JSON lines become one line each; the app\'s other output passes through untouched, byte for byte', t => {
	const out: string[] = [];
	const sink = new PrettySink({write: (data: string | Buffer) => out.push(String(data))}, line => `<${String(line['source'])}|${String(line['msg'])}>\n`);
	sink.write('{"level":"info","role":"worker","worker":2,"pid":1,"msg":"hi"}\nplain text\n{"role":"primary","worker":3,"msg":"about"}\n{broken\npartial');
	t.deepEqual(out, ['<worker 2|hi>\nplain text\n<primary|about>\n{broken\npartial'], 'one write; the piece after the last newline as it was');
	t.is(prettyLine(() => 'x', '[1,2]'), undefined);
	const bytes: Buffer[] = [];
	const raw = new PrettySink({write: (data: string | Buffer) => bytes.push(Buffer.from(data))}, () => 'x\n');
	raw.write(Buffer.from([0xFF, 0xFE, 0x41, 0x0A]));
	t.deepEqual([...Buffer.concat(bytes)], [0xFF, 0xFE, 0x41, 0x0A], 'bytes that are not UTF-8 are not turned into U+FFFD');
});

test('pretty: JSON that pino-pretty chokes on (a level that is an object) passes through untouched, never crashes the primary', async t => {
	const out: string[] = [];
	const sink = await prettySink({write: (data: string | Buffer) => out.push(String(data))}, false);
	const odd = JSON.stringify({level: {a: 1}, msg: 'x'});
	t.notThrows(() => {
		sink.write(`${odd}\n`);
	});
	t.deepEqual(out, [`${odd}\n`]);
});

// The primary's own metrics, on fake workers.
function cluster(workers = 2) {
	const edges = fakeEdges();
	const {logger, lines} = captureLogger();
	const sink = {write() {}};
	const options: PrimaryOptions = {
		...DEFAULT_PRIMARY_OPTIONS,
		script: '/app/server.js', args: [], workers, settings: {...DEFAULT_SETTINGS, servePeriodMs: 1000, rejectPeriodMs: 4000, gracePeriodMs: 30_000},
		listenTimeoutMs: 10_000, maxStartFailures: 3, restartDelayMs: 100, maxRestartDelayMs: 1000, backoffResetMs: 30_000,
		// Its fake workers never beat: no watchdog.
		workerTimeoutMs: 0,
	};
	const primary = new Primary(options, {logger, stdout: sink, stderr: sink}, edges);
	const metrics = new ClusterMetrics(() => primary.view, logger);
	void primary.run();
	for (const worker of edges.cluster.workers) {
		worker.attach().listen();
	}

	return {edges, primary, metrics, lines, workers: edges.cluster.workers};
}

/** Answers every metrics request the worker has received and not yet answered. */
function answer(worker: FakeWorker, metrics: MetricJson[], answered: Set<unknown>): void {
	for (const message of worker.received) {
		if (message['type'] === 'metrics-request' && !answered.has(message)) {
			answered.add(message);
			worker.say({type: 'metrics', id: message['id'] as number, metrics});
		}
	}
}

/** A scrape that every live worker answers with no app metrics. */
function scraper({cluster: fakeCluster}: ReturnType<typeof cluster>['edges'], metrics: ClusterMetrics): () => Promise<string> {
	const answered = new Set<unknown>();
	return async () => {
		const pending = metrics.scrape();
		for (const worker of fakeCluster.live) {
			answer(worker, [], answered);
		}

		return pending;
	};
}

test('a worker just forked (a reload\'s new worker) is not asked: the scrape does not wait for it, no failure counted', async t => {
	const {edges, metrics, workers} = cluster();
	const [a, b] = workers;
	edges.signal('SIGHUP');
	const candidate = edges.cluster.workers[2]!;
	const answered = new Set<unknown>();
	const scrape = metrics.scrape();
	answer(a!, await workerRegistry(3, 1), answered);
	answer(b!, await workerRegistry(4, 1), answered);
	// No clock advance: the scrape must settle on the two answers alone.
	const text = await scrape;
	t.is(sample(text, 'app_hits_total{route="/"}'), 7);
	t.is(sample(text, 'graceful_cluster_metrics_scrape_failures_total'), 0);
	t.false(candidate.received.some(message => message['type'] === 'metrics-request'), 'not asked before it attached');
});

test('an app metric named with our prefix is left out (two series of one name would spoil the scrape) and named in the log, once', async t => {
	const {metrics, lines, workers} = cluster();
	const withOurs = async (): Promise<MetricJson[]> => {
		const register = new client.Registry();
		new client.Counter({name: 'graceful_cluster_worker_starts_total', help: 'the app\'s own', registers: [register]}).inc(5);
		return [...await workerRegistry(1, 1), ...JSON.parse(JSON.stringify(await register.getMetricsAsJSON())) as MetricJson[]];
	};

	for (let round = 0; round < 2; round++) {
		const answered = new Set<unknown>();
		const scrape = metrics.scrape();
		for (const worker of workers) {
			answer(worker, await withOurs(), answered);
		}

		const text = await scrape;
		t.is(text.match(/^# TYPE graceful_cluster_worker_starts_total /gm)?.length, 1, 'ours alone');
		t.is(sample(text, 'app_hits_total{route="/"}'), 2);
	}

	const warnings = lines.filter(line => line.msg === 'an app metric uses graceful-cluster\'s prefix; it is left out of /metrics: rename it');
	t.deepEqual(warnings.map(line => line['metric']), ['graceful_cluster_worker_starts_total'], 'once, however many scrapes and workers');
});

test('a worker that does not answer makes the scrape partial, not failed: its last values count, the failure is counted', async t => {
	const {edges, metrics, workers} = cluster();
	const [a, b] = workers;
	const answered = new Set<unknown>();
	let scrape = metrics.scrape();
	answer(a!, await workerRegistry(3, 1), answered);
	answer(b!, await workerRegistry(4, 1), answered);
	let text = await scrape;
	t.is(sample(text, 'app_hits_total{route="/"}'), 7);
	t.is(sample(text, 'graceful_cluster_metrics_scrape_failures_total'), 0);
	// b hangs.
	scrape = metrics.scrape();
	answer(a!, await workerRegistry(5, 1), answered);
	edges.clock.advance(METRICS_WAIT_MS);
	text = await scrape;
	t.is(sample(text, 'app_hits_total{route="/"}'), 9, 'b counts with what it said last');
	t.is(sample(text, 'graceful_cluster_metrics_scrape_failures_total'), 1);
});

test('own metrics: workers by state add up to the live workers; starts and exits by reason; drain phase and status follow the drain', async t => {
	const {edges, primary, metrics, workers} = cluster();
	const [a, b] = workers;
	const scrape = scraper(edges, metrics);

	let text = await scrape();
	t.is(sample(text, 'graceful_cluster_workers{state="listening"}'), 2);
	t.is(sample(text, 'graceful_cluster_worker_starts_total{reason="initial"}'), 2);
	t.is(sample(text, 'graceful_cluster_drain_phase'), 0);
	// a crashes and is restarted.
	a!.exit(7);
	edges.clock.advance(100);
	edges.cluster.workers[2]!.attach().listen();
	text = await scrape();
	t.is(sample(text, 'graceful_cluster_worker_exits_total{reason="crash"}'), 1);
	t.is(sample(text, 'graceful_cluster_worker_starts_total{reason="crash"}'), 1);
	t.is(sample(text, 'graceful_cluster_workers{state="listening"}'), 2);
	const status = clusterStatus(primary.view, metrics.restartsOf) as {workers: Array<{slot: number; restarts: number; state: string}>; phase: string};
	t.deepEqual(status.workers.map(worker => [worker.slot, worker.restarts, worker.state]), [[0, 1, 'listening'], [1, 0, 'listening']]);
	// The drain: serve, reject, closing.
	edges.signal('SIGTERM');
	t.is(sample(await scrape(), 'graceful_cluster_drain_phase'), 1);
	edges.clock.advance(1000);
	b!.say({type: 'inflight', inflight: 1, served: 2, rejected: 5, upgrades: 0, streams: 0});
	text = await scrape();
	t.is(sample(text, 'graceful_cluster_drain_phase'), 2);
	t.is(sample(text, 'graceful_cluster_requests_rejected_total'), 5);
	t.is(sample(text, 'graceful_cluster_requests_in_flight'), 1);
	edges.clock.advance(4000);
	t.is(sample(await scrape(), 'graceful_cluster_drain_phase'), 3);
	t.like(clusterStatus(primary.view, metrics.restartsOf), {state: 'draining', phase: 'closing', drainPhase: 3});
	b!.drained().exit(0);
	edges.cluster.workers[2]!.drained().exit(0);
	text = await scrape();
	t.is(sample(text, 'graceful_cluster_worker_exits_total{reason="drain"}'), 2);
	t.is(sample(text, 'graceful_cluster_drain_phase'), 4);
	t.is(sample(text, 'graceful_cluster_workers{state="listening"}'), 0);
	t.is(sample(text, 'graceful_cluster_drain_duration_seconds'), 5);
	t.like(clusterStatus(primary.view, metrics.restartsOf), {state: 'stopping', phase: 'stopping', drainPhase: 4, drain: {signal: 'SIGTERM', forcedBy: null, durationMs: 5000}});
});

test('shedding (--max-event-loop-delay): the heartbeats\' running totals summed into counters that keep a gone worker\'s share; a gauge of workers shedding; /status per worker', async t => {
	const {edges, primary, metrics, workers} = cluster();
	const [a, b] = workers;
	const scrape = scraper(edges, metrics);

	let text = await scrape();
	t.is(sample(text, 'graceful_cluster_requests_shed_total'), 0);
	t.is(sample(text, 'graceful_cluster_shedding_seconds_total'), 0);
	a!.beat({shed: 4, sheddingMs: 500, shedding: true});
	b!.beat({shed: 1, sheddingMs: 250, shedding: false});
	a!.beat({shed: 6, sheddingMs: 1500, shedding: true});
	text = await scrape();
	t.is(sample(text, 'graceful_cluster_requests_shed_total'), 7);
	t.is(sample(text, 'graceful_cluster_shedding_seconds_total'), 1.75);
	t.is(sample(text, 'graceful_cluster_workers_shedding'), 1);
	const status = clusterStatus(primary.view, metrics.restartsOf) as {workers: Array<{shed: number | null; shedding: boolean | null}>};
	t.deepEqual(status.workers.map(worker => [worker.shed, worker.shedding]), [[6, true], [1, false]]);
	// a crashes: its share stays; its replacement counts from 0.
	a!.exit(7);
	edges.clock.advance(100);
	const c = edges.cluster.workers[2]!;
	c.attach().listen();
	c.beat({shed: 2, sheddingMs: 100, shedding: false});
	text = await scrape();
	t.is(sample(text, 'graceful_cluster_requests_shed_total'), 9);
	t.is(sample(text, 'graceful_cluster_shedding_seconds_total'), 1.85);
	t.is(sample(text, 'graceful_cluster_workers_shedding'), 0);
	// Without the option a heartbeat carries none: null in /status.
	const plain = edges.cluster.workers[1]!;
	plain.beat({});
	const after = clusterStatus(primary.view, metrics.restartsOf) as {workers: Array<{id: number; shed: number | null; shedding: boolean | null}>};
	t.like(after.workers.find(worker => worker.id === plain.id), {shed: null, shedding: null});
});
