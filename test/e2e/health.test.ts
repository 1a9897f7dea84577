// Hung workers, readiness checks and recycling, through the real CLI.
import {setTimeout as delay} from 'node:timers/promises';
import test, {type ExecutionContext} from 'ava';
import {freePort, url} from '../../testkit/net.js';
import {isAlive, waitUntil} from '../../testkit/proc.js';
import {fixture, startCluster, type LogLine} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';
import {steadyLoad} from '../helpers/load.js';

const APP = fixture('health.mjs');
const HUNG = 'worker hung: its event loop was silent longer than --worker-timeout; killing it';
/** A new connection per request (round-robin spreads them), answered within a second or counted unanswered. */
const quick = client.extend({timeout: {request: 1000}});

/** Pids that answered /pid within a second each, over `ms`; the requests that got no answer are counted. */
async function sample(port: number, ms: number): Promise<{pids: Map<number, number>; unanswered: number}> {
	const pids = new Map<number, number>();
	let unanswered = 0;
	const until = Date.now() + ms;
	while (Date.now() < until) {
		try {
			const pid = Number((await quick(url(port, '/pid'))).body);
			pids.set(pid, (pids.get(pid) ?? 0) + 1);
		} catch {
			unanswered++;
		}
	}

	return {pids, unanswered};
}

const listeningPids = (lines: readonly LogLine[]): number[] => lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));

/** The workers as /status on the --metrics port shows them: `heartbeatAgeMs` is null before a worker's first heartbeat. */
async function workerStatus(metricsPort: number): Promise<Array<{pid: number; heartbeatAgeMs: number | null; eventLoopDelayMs: number | null}>> {
	return (JSON.parse((await client(url(metricsPort, '/status'))).body) as {workers: Array<{pid: number; heartbeatAgeMs: number | null; eventLoopDelayMs: number | null}>}).workers;
}

/** Starts the cluster with a --metrics port, for /status; resolves once every worker has sent its first heartbeat (a second apart, from its main loop). */
async function startBeating(t: ExecutionContext, options: string[], workers = 2) {
	const metricsPort = await freePort();
	const app = await startCluster(t, [...options, '--metrics', `127.0.0.1:${metricsPort}`], APP, {workers});
	await waitUntil(async () => {
		const status = await workerStatus(metricsPort);
		return status.length === workers && status.every(worker => worker.heartbeatAgeMs !== null);
	}, {timeout: 10_000, what: 'every worker\'s first heartbeat'});
	return Object.assign(app, {metricsPort});
}

/**
 * Resolves with the pid of the worker whose event loop a /spin has blocked: the
 * first whose heartbeat is overdue by half a period (1500 ms since the last; a
 * loop that runs beats every 1000 ms).
 */
async function spinningWorker(metricsPort: number): Promise<number> {
	let pid: number | undefined;
	await waitUntil(async () => {
		pid = (await workerStatus(metricsPort)).find(worker => (worker.heartbeatAgeMs ?? 0) >= 1500)?.pid;
		return pid !== undefined;
	}, {timeout: 10_000, what: 'a worker\'s heartbeat overdue (the /spin under way)'});
	return pid!;
}

test('a stall of the event loop shows in the next heartbeat\'s eventLoopDelayMs, whole; the beat after it reads the loop at rest', async t => {
	const app = await startBeating(t, [], 1);
	const delays = async (): Promise<number> => (await workerStatus(app.metricsPort))[0]?.eventLoopDelayMs ?? 0;
	t.is((await client(url(app.port, '/block?ms=700'))).body, 'done');
	let seen = 0;
	await waitUntil(async () => {
		seen = await delays();
		return seen >= 600;
	}, {timeout: 5000, what: 'the 700 ms stall in /status'});
	t.true(seen <= 1000, `read ${seen} ms for a 700 ms stall`);
	await waitUntil(async () => (await delays()) < 100, {timeout: 5000, what: 'the beat after it, at rest'});
});

test.serial('a while(true) worker is killed within --worker-timeout + a few seconds, its stack in the log; a replacement serves, the other worker throughout', async t => {
	// After each worker's first heartbeat: its counts are in the kill's log line.
	const app = await startBeating(t, ['--worker-timeout', '3s', '--hung-stack', 'on', '--reject-period', '300ms']);
	const [first, second] = listeningPids(app.lines);
	// Which worker takes the /spin is round-robin's choice: the hung one is whichever stops answering.
	const spinAt = Date.now();
	void client(url(app.port, '/spin'), {timeout: {request: 15_000}}).catch(() => {});
	const during = sample(app.port, 2500);
	const hung = await app.waitForLog(HUNG, {timeout: 12_000});
	const killedAfter = Date.now() - spinAt;
	t.true(killedAfter < 3000 + 4000, `killed ${killedAfter} ms after the spin began`);
	t.true(Number(hung['silentMs']) >= 3000);
	t.is(hung['workerTimeoutMs'], 3000);
	t.true([first, second].includes(Number(hung['workerPid'])));
	t.regex(JSON.stringify(hung['stack']), /spinForever \(file:\/\/.*health\.mjs:\d+:\d+\)/, 'where it was stuck');
	t.is(hung['inflight'], 0, 'its last heartbeat came before the spin began');
	const other = hung['workerPid'] === first ? second! : first!;
	const {pids} = await during;
	t.true((pids.get(other) ?? 0) > 3, `the other worker served while one hung: ${JSON.stringify([...pids])}`);
	t.like(await app.waitForLog(line => line.msg === 'worker exited' && line['workerPid'] === hung['workerPid']), {killedFor: 'hung', reason: 'hung', signal: 'SIGKILL'});
	const started = await app.waitForLog(line => line.msg === 'worker started' && line['reason'] === 'hung');
	await app.waitForLog(line => line.msg === 'worker listening' && line['worker'] === started['worker']);
	t.false(isAlive(Number(hung['workerPid'])));
	const after = await sample(app.port, 1000);
	t.true(after.pids.has(Number(started['workerPid'])), 'the replacement serves');
	t.true(after.pids.has(other));
	t.is(after.unanswered, 0);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test.serial('a SIGSTOPped worker (no attach()) is killed and replaced', async t => {
	const app = await startCluster(t, ['--worker-timeout', '3s', '--reject-period', '300ms'], APP, {env: {FIXTURE_NO_ATTACH: '1'}});
	const [stopped] = listeningPids(app.lines);
	process.kill(stopped!, 'SIGSTOP');
	const hung = await app.waitForLog(HUNG, {timeout: 10_000});
	t.is(hung['workerPid'], stopped);
	t.is(hung['stack'], null);
	t.like(await app.waitForLog(line => line.msg === 'worker exited' && line['workerPid'] === stopped), {killedFor: 'hung', signal: 'SIGKILL'});
	const started = await app.waitForLog(line => line.msg === 'worker started' && line['reason'] === 'hung');
	await app.waitForLog(line => line.msg === 'worker listening' && line['worker'] === started['worker']);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test.serial('a worker busy for seconds in slices, yielding between them, is left alone', async t => {
	const app = await startCluster(t, ['--worker-timeout', '3s', '--reject-period', '300ms'], APP, {workers: 1});
	const response = await client(url(app.port, '/busy?ms=7000'));
	t.is(response.body, 'done');
	// Not a race: that nothing happens is the point. The watchdog looks once a
	// second, so a kill for the busy spell would come within a second of its end;
	// 1.5 s covers that look with room to spare.
	await delay(1500);
	t.falsy(app.lines.find(line => line.msg === HUNG), app.text());
	t.is(app.lines.filter(line => line.msg === 'worker started').length, 1);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test.serial('during a drain a hung worker is killed at --worker-timeout, and the drain\'s outcome says so', async t => {
	const app = await startBeating(t, ['--worker-timeout', '3s', '--reject-period', '1s', '--grace-period', '30s']);
	void client(url(app.port, '/spin'), {timeout: {request: 15_000}}).catch(() => {});
	// The signal comes once the spin has begun (a request not yet taken would be
	// turned away with a 503), and over a second before the watchdog's 3 s.
	const spinning = await spinningWorker(app.metricsPort);
	const signalAt = Date.now();
	app.kill('SIGTERM');
	const hung = await app.waitForLog(HUNG, {timeout: 10_000});
	t.is(hung['workerPid'], spinning);
	const finished = await app.waitForLog('drain finished');
	t.true(Date.now() - signalAt < 8000, 'long before the 30 s grace period');
	t.like(finished, {outcome: 'forced', exitCode: 5, lost: [{workerPid: spinning, killedFor: 'hung'}]});
	t.is((await app.exited).code, 5, app.text());
});

test.serial('readiness checks: pass, throw, reject, false, time out (sharing one run), recover; /livez never runs them; a drain answers 503 at once', async t => {
	// --check-timeout 1s: a check run takes that long, so the drain's answer, given
	// without one, is told apart from it by a bound a loaded machine meets.
	const app = await startCluster(t, ['--check-timeout', '1s', '--reject-period', '2s', '--grace-period', '10s'], APP, {workers: 1, env: {FIXTURE_CHECKS: '1'}});
	const ready = async () => client(url(app.port, '/readyz'));
	const set = async (mode: string) => client(url(app.port, `/set?db=${mode}`));
	t.like(await ready(), {statusCode: 200, body: 'ready\n'});
	await set('throw');
	// The check's name only: its error's text goes to the worker's log, never to a client.
	t.like(await ready(), {statusCode: 503, body: 'db: not ready\n'});
	t.like(await app.waitForLog('readiness checks failed'), {role: 'worker', failures: ['db: Error: connection refused']});
	t.like(await client(url(app.port, '/livez')), {statusCode: 200, body: 'alive\n'});
	await set('reject');
	t.like(await ready(), {statusCode: 503, body: 'db: not ready\n'});
	await app.waitForLog(line => line.msg === 'readiness checks failed' && JSON.stringify(line['failures']) === '["db: Error: pool exhausted"]');
	await set('false');
	t.like(await ready(), {statusCode: 503, body: 'db: not ready\n'});
	await set('slow');
	const runsBefore = Number((await client(url(app.port, '/runs'))).body);
	const startedAt = Date.now();
	const probes = await Promise.all([ready(), ready(), ready()]);
	const took = Date.now() - startedAt;
	for (const probe of probes) {
		t.like(probe, {statusCode: 503, body: 'db: not ready\n'});
	}

	t.true(took >= 950 && took < 2500, `bounded by --check-timeout: ${took} ms`);
	t.is(Number((await client(url(app.port, '/runs'))).body) - runsBefore, 1, 'three probes, one run');
	await set('ok');
	t.like(await ready(), {statusCode: 200, body: 'ready\n'});
	await set('slow');
	app.kill('SIGTERM');
	// The worker's line: the primary logs 'drain started' before the worker has the news.
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started');
	const drainProbeAt = Date.now();
	t.like(await ready(), {statusCode: 503, body: 'draining\n'});
	// Running the (slow) check would take the 1 s --check-timeout.
	const drainProbeMs = Date.now() - drainProbeAt;
	t.true(drainProbeMs < 800, `at once, without running the checks: ${drainProbeMs} ms`);
	t.is((await app.exited).code, 0, app.text());
});

/** Recycling under keep-alive load: zero failed requests, each replacement logged with its reason. */
async function recycleUnderLoad(t: ExecutionContext, options: string[], reason: 'requests' | 'memory', trigger?: (port: number) => Promise<void>) {
	const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '10s', ...options], APP);
	const oldPids = listeningPids(app.lines);
	const load = steadyLoad(app.port, {clients: 6});
	t.teardown(async () => load.stop());
	await load.more(100);
	await trigger?.(app.port);
	await app.waitForLog(line => line.msg === 'worker replaced' && line['reason'] === reason, {count: 2, timeout: 25_000});
	await app.waitForLog(line => line.msg === 'worker exited' && line['reason'] === reason, {count: 2, timeout: 15_000});
	await load.more(200);
	await load.stop();
	const failures = load.results.filter(result => 'error' in result || result.status !== 200);
	t.deepEqual(failures, [], `no request failed during the recycling (${load.results.length} requests)`);
	const recycled = app.lines.filter(line => line.msg === 'recycling worker: a new one starts, then this one retires');
	t.true(recycled.length >= 2);
	t.true(recycled.every(line => line['reason'] === reason));
	t.true(app.lines.filter(line => line.msg === 'worker started' && line['reason'] === reason).length >= 2);
	t.true(oldPids.every(pid => !isAlive(pid)), 'the old workers are gone');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	return app;
}

test.serial('recycling by --max-requests (+ jitter) under keep-alive load: zero failed requests', async t => {
	const app = await recycleUnderLoad(t, ['--max-requests', '300', '--max-requests-jitter', '100'], 'requests');
	const limits = app.lines.filter(line => line.msg === 'recycling worker: a new one starts, then this one retires').map(line => Number(line['maxRequests']));
	t.true(limits.every(limit => limit >= 300 && limit <= 400), String(limits));
});

test.serial('recycling by --max-memory-restart under keep-alive load: zero failed requests', async t => {
	await recycleUnderLoad(t, ['--max-memory-restart', '150M'], 'memory', async port => {
		// Each connection goes to the next worker (round-robin): both grow past the limit.
		for (let i = 0; i < 2; i++) {
			await client(url(port, '/alloc?mb=160'));
		}
	});
});
