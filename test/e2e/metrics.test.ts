// --metrics and --log-format end to end: the real CLI, real workers with the
// app's own prom-client registry, scraped over HTTP while serving, after a
// crash, during a drain, with a hung worker; /status; a taken port; pretty logs
// on a pseudo-terminal.
import {spawnSync} from 'node:child_process';
import {once} from 'node:events';
import net from 'node:net';
import test from 'ava';
import {freePort, url} from '../../testkit/net.js';
import {eventually, waitUntil} from '../../testkit/proc.js';
import {CLI, fixture, start, startCluster} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

const APP = fixture('metrics-app.mjs');

interface Scrape {
	readonly text: string;
	readonly ms: number;
	value(series: string): number | undefined;
}

async function scrape(port: number): Promise<Scrape> {
	const started = performance.now();
	const response = await client(url(port, '/metrics'));
	const ms = performance.now() - started;
	if (response.statusCode !== 200) {
		throw new Error(`/metrics answered ${response.statusCode}: ${response.body}`);
	}

	const text = response.body;
	return {
		text,
		ms,
		value(series) {
			const line = text.split('\n').find(candidate => candidate.startsWith(`${series} `));
			return line === undefined ? undefined : Number(line.slice(series.length + 1));
		},
	};
}

/**
 * Scrapes until `ready` holds, at most 10 s, and returns the last scrape for the
 * test to assert on (so a value that never comes fails with what was there).
 * For what the workers tell the primary over IPC: a scrape asks every worker for
 * its registry, and during a drain a worker reports its counts when one changes,
 * at most four times a second.
 */
async function scrapeUntil(port: number, ready: (metrics: Scrape) => boolean): Promise<Scrape> {
	let last: Scrape | undefined;
	await eventually(async () => ready(last = await scrape(port)), {timeout: 10_000});
	return last!;
}

async function status(port: number): Promise<Record<string, any>> { // eslint-disable-line @typescript-eslint/no-explicit-any -- parsed JSON, read field by field
	return JSON.parse((await client(url(port, '/status'))).body) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- parsed JSON, read field by field
}

async function metricsCluster(t: Parameters<typeof start>[0], options: string[] = [], workers = 2) {
	const metricsPort = await freePort();
	// A short reject phase unless the test wants its own: the exit is not what these tests are about.
	const reject = options.includes('--reject-period') ? [] : ['--reject-period', '300ms'];
	const app = await startCluster(t, ['--metrics', `127.0.0.1:${metricsPort}`, ...reject, ...options], APP, {workers});
	return Object.assign(app, {metricsPort});
}

async function hits(port: number, count: number): Promise<void> {
	for (let i = 0; i < count; i++) {
		t200((await client(url(port, '/'))).statusCode);
	}
}

async function waitFor(condition: () => boolean): Promise<void> {
	await waitUntil(condition, {timeout: 10_000, what: 'output'});
}

function t200(status: number): void {
	if (status !== 200) {
		throw new Error(`expected 200, got ${status}`);
	}
}

test('serving: own metrics, the primary\'s process metrics, and the app\'s counter summed exactly over two workers; /status', async t => {
	const app = await metricsCluster(t);
	await hits(app.port, 25);
	const metrics = await scrape(app.metricsPort);
	t.is(metrics.value('app_requests_total{route="/"}'), 25, 'summed over the workers, exactly');
	t.is(metrics.value('app_busy'), 2, 'a gauge of 1 per worker: both workers answered');
	t.is(metrics.value('app_latency_seconds_count'), 25);
	t.is(metrics.value('graceful_cluster_workers{state="listening"}'), 2);
	t.is(metrics.value('graceful_cluster_worker_starts_total{reason="initial"}'), 2);
	t.is(metrics.value('graceful_cluster_drain_phase'), 0);
	t.is(metrics.value('graceful_cluster_metrics_scrape_failures_total'), 0);
	t.true((metrics.value('graceful_cluster_primary_process_resident_memory_bytes') ?? 0) > 10_000_000, 'the primary\'s own process metrics');
	t.regex(metrics.text, /# TYPE graceful_cluster_worker_exits_total counter/);

	const body = await status(app.metricsPort);
	t.like(body, {state: 'running', phase: 'serving', drainPhase: 0, drain: null, workersDesired: 2, pid: app.pid});
	t.is(body['workers'].length, 2);
	for (const [index, worker] of (body['workers'] as Array<Record<string, unknown>>).entries()) {
		t.like(worker, {slot: index, state: 'listening', role: 'member', attached: true, startReason: 'initial', restarts: 0, inflight: 0, connections: {upgrades: 0, streams: 0}});
		for (const field of ['id', 'pid', 'uptimeSeconds', 'rssBytes', 'eventLoopDelayMs', 'heartbeatAgeMs', 'requests']) {
			t.true(field in worker, field);
		}
	}

	t.is((await client(url(app.metricsPort, '/nope'))).statusCode, 404);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('after a crash: the restart is counted and the app\'s counter is not lower', async t => {
	const app = await metricsCluster(t, ['--restart-delay', '100ms']);
	await hits(app.port, 20);
	const before = await scrape(app.metricsPort);
	t.is(before.value('app_requests_total{route="/"}'), 20);
	void client(url(app.port, '/crash')).catch(() => undefined);
	await app.waitForLog('worker listening', {count: 3});
	const after = await scrape(app.metricsPort);
	t.true((after.value('app_requests_total{route="/"}') ?? 0) >= 20, after.text);
	t.is(after.value('graceful_cluster_worker_exits_total{reason="crash"}'), 1);
	t.is(after.value('graceful_cluster_worker_starts_total{reason="crash"}'), 1);
	t.is(after.value('graceful_cluster_workers{state="listening"}'), 2);
	await hits(app.port, 4);
	t.true(((await scrape(app.metricsPort)).value('app_requests_total{route="/"}') ?? 0) >= 24);
	const restarts = (await status(app.metricsPort))['workers'].map((worker: {restarts: number}) => worker.restarts) as number[];
	t.deepEqual(restarts.sort(), [0, 1]);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('during a drain: the phase is shown, rejected requests counted; a reload is counted too; the final values survive the workers', async t => {
	const app = await metricsCluster(t, ['--reject-period', '3s']);
	await hits(app.port, 10);
	process.kill(app.pid, 'SIGHUP');
	await app.waitForLog('reload finished');
	await app.waitForLog('worker exited', {count: 2});
	let metrics = await scrape(app.metricsPort);
	t.is(metrics.value('graceful_cluster_reloads_total{result="finished"}'), 1);
	t.is(metrics.value('graceful_cluster_worker_exits_total{reason="reload"}'), 2);
	t.is(metrics.value('app_requests_total{route="/"}'), 10, 'the retired workers\' counts kept, from their final values');
	const slow = client(url(app.port, '/slow?ms=2500'));
	slow.catch(() => undefined); // awaited below; a failure before that must not be unhandled
	// In flight once the app has counted it (the fixture counts on arrival).
	const slowSeries = 'app_requests_total{route="/slow"}';
	t.is((await scrapeUntil(app.metricsPort, m => m.value(slowSeries) === 1)).value(slowSeries), 1, 'the slow request reached a worker');
	app.kill('SIGTERM');
	// Both workers' lines: the primary's 'drain started' comes before the workers have the news.
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started', {count: 2});
	t.is((await client(url(app.port, '/'))).statusCode, 503);
	// The workers' reports: sent as each drain starts, and again when the 503 changes the rejected count.
	metrics = await scrapeUntil(app.metricsPort, m => m.value('graceful_cluster_requests_in_flight') === 1 && (m.value('graceful_cluster_requests_rejected_total') ?? 0) >= 1);
	t.is(metrics.value('graceful_cluster_drain_phase'), 2, 'reject');
	t.is(metrics.value('graceful_cluster_requests_in_flight'), 1);
	t.is(metrics.value('graceful_cluster_requests_rejected_total'), 1);
	const body = await status(app.metricsPort);
	t.like(body, {state: 'draining', phase: 'reject', drainPhase: 2, drain: {signal: 'SIGTERM', forcedBy: null}});
	t.truthy(Date.parse(body['drain']['startedAt']));
	// With --metrics the workers count each peer while serving, so /status has its rate before the signal.
	const peers = body['drain']['arrivalPeers'] as Array<{peer: string; ratePerSecond: number; count: number}>;
	t.true(peers.some(peer => peer.peer === '127.0.0.1' && peer.ratePerSecond > 0 && peer.count >= 1), JSON.stringify(peers));
	t.is((await slow).statusCode, 200);
	t.is((await app.exited).code, 0);
	t.like(app.lines.find(line => line.msg === 'drain finished'), {rejected: 1, closedLongLived: 0, workersLost: 0, workersHung: 0});
	t.true(app.lines.filter(line => line.msg === 'drain progress').length <= 2, 'an idle reject phase of 3 s: at most the first line and one change');
});

test('a worker that does not answer: the scrape is partial within the bound, the failure counted', async t => {
	const app = await metricsCluster(t);
	await hits(app.port, 10);
	t.is((await scrape(app.metricsPort)).value('app_requests_total{route="/"}'), 10);
	// One worker blocks its event loop for 5 s.
	t.is((await client(url(app.port, '/block?ms=5000'))).statusCode, 200);
	const metrics = await scrape(app.metricsPort);
	t.true(metrics.ms < 3500, `answered in ${Math.round(metrics.ms)} ms: the 2 s bound, not the 5 s block`);
	t.is(metrics.value('graceful_cluster_metrics_scrape_failures_total'), 1);
	t.is(metrics.value('app_requests_total{route="/"}'), 10, 'the blocked worker counts with its last values (the /block request came after them)');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('a metrics port that is taken stops the start with exit 2, saying so; nothing is started', async t => {
	const blocker = net.createServer();
	blocker.listen(0, '127.0.0.1');
	await once(blocker, 'listening');
	t.teardown(() => blocker.close());
	const {port} = blocker.address() as net.AddressInfo;
	const proc = start(t, ['--workers', '1', '--metrics', `127.0.0.1:${port}`, APP]);
	t.is((await proc.exited).code, 2);
	t.regex(proc.text(), new RegExp(`--metrics \\(GRACEFUL_CLUSTER_METRICS\\) 127\\.0\\.0\\.1:${port}: cannot listen: port ${port} is already in use`));
	t.false(proc.lines.some(line => line.msg === 'worker started'));
	const invalid = start(t, ['--workers', '1', '--metrics', '99999', APP]);
	t.is((await invalid.exited).code, 2);
	t.regex(invalid.text(), /--metrics \(GRACEFUL_CLUSTER_METRICS\): "99999" is not a port/);
});

test('--metrics on the app\'s own port is a usage error naming --metrics (exit 2): before any worker starts when PORT says so, once the app fails to listen otherwise', async t => {
	const port = await freePort();
	const early = start(t, ['--workers', '1', '--metrics', String(port), APP], {env: {PORT: String(port)}});
	t.is((await early.exited).code, 2);
	t.regex(early.text(), new RegExp(`--metrics ${port} is the port the app is given \\(PORT=${port}\\)`));
	t.false(early.lines.some(line => line.msg === 'worker started'), 'nothing started');

	const later = start(t, ['--workers', '1', '--max-start-failures', '1', '--metrics', String(port), fixture('listen-port.mjs')], {env: {LISTEN_PORT: String(port)}});
	t.is((await later.exited).code, 2, later.text());
	t.like(later.lines.find(line => line.msg === 'the app listens on the --metrics port; give --metrics another port'), {port, level: 'fatal'});
});

test('logs: JSON lines when piped; --log-format pretty prints one line per event, worker lines too, the app\'s own output untouched', async t => {
	const json = await startCluster(t, ['--reject-period', '0s'], fixture('app.mjs'), {workers: 1});
	json.kill('SIGTERM');
	t.is((await json.exited).code, 0);
	t.true(json.lines.some(line => line.msg === 'drain finished'), 'JSON by default when stdout is a pipe');

	const pretty = start(t, ['--workers', '1', '--log-format', 'pretty', '--reject-period', '0s', APP], {env: {NO_COLOR: '1'}});
	await waitFor(() => pretty.text().includes('worker listening'));
	pretty.kill('SIGTERM');
	await pretty.exited;
	const text = pretty.text();
	t.regex(text, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: primary: starting workers \{/m);
	t.regex(text, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: worker 1: drain started \{/m, 'a worker\'s JSON line, pretty-printed by the primary');
	t.regex(text, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: primary: drain finished \{/m);
	t.regex(text, /^metrics-app: a plain line, <not json>$/m, 'the app\'s own output, untouched');
	t.false(/"level":"info"/.test(text), 'no JSON log line left');
	t.false(text.includes('\u001B['), 'no colour under NO_COLOR, nor on a pipe');
});

test('logs: on a terminal (script) pretty is the default, coloured', t => {
	const result = spawnSync('script', ['-qec', `timeout -s INT 3 ${process.execPath} ${CLI} --workers 1 --reject-period 0s ${fixture('app.mjs')}`, '/dev/null'], {encoding: 'utf8', timeout: 15_000, env: {...process.env, NO_COLOR: ''}});
	if (result.error) {
		t.fail(`script(1) is needed for this test: ${result.error.message}`);
		return;
	}

	// eslint-disable-next-line no-control-regex -- the colour codes are what this looks for
	t.regex(result.stdout, /INFO\u001B\[39m: \u001B\[36mprimary: starting workers/);
	t.regex(result.stdout, /worker 1: worker drained/);
	t.false(result.stdout.includes('"msg":"starting workers"'));
});
