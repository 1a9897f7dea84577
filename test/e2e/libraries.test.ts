// Apps that already shut themselves down, with the real libraries, as their
// authors wrote them (no attach()): the drain takes their servers as they
// listen; their cleanup runs to its end, once per worker, after the requests
// in flight; the reject phase answers 503, never a refusal; the drain reports
// what happened. (test/fixtures/libraries/: one small app per library.)
import test from 'ava';
import type {ExecutionContext} from 'ava';
import {performance} from 'node:perf_hooks';
import {url} from '../../testkit/net.js';
import {waitUntil} from '../../testkit/proc.js';
import {start, type LogLine} from '../helpers/cluster.js';
import {app, cleanupDone, drainFinished, startApp, WORKERS} from '../helpers/libraries.js';
import {client, RawConnection} from '../helpers/http.js';

interface Scenario {
	readonly name: string;
	/** How the signal is sent: to the primary alone (Kubernetes) or to the whole group (a terminal, systemd). */
	readonly send?: 'kill' | 'killGroup';
	readonly signal?: NodeJS.Signals;
	/** The signal the app's cleanup is told, when it says. */
	readonly told?: string;
}

/**
 * Two slow requests in flight and a keep-alive connection, then the signal:
 * both finish, `/readyz` and a new request in the reject phase get the drain
 * 503 (the keep-alive connection's with `Connection: close`, then a FIN), the
 * app's cleanup runs to its end once per worker after the slow requests, the
 * drain is clean and counted, exit 0.
 */
async function drainsCleanly(t: ExecutionContext, {name, send = 'kill', signal = 'SIGTERM', told, env}: Scenario & {env?: Record<string, string>}): Promise<readonly LogLine[]> {
	// The request that must get the 503 is sent once both workers' 'rejecting new
	// requests' lines are read. In a loaded CI run (the whole suite on 2 cores) that
	// reading once came late enough for the request to miss a 1.5 s reject phase
	// and meet the worker's close: a hang-up, not a 503. 3 s leaves room.
	const proc = await startApp(t, name, {rejectPeriod: '3s', env});
	const keepAlive = await RawConnection.open(proc.port);
	t.teardown(() => {
		keepAlive.close();
	});
	t.like(await keepAlive.request('/hello'), {status: 200, headers: {connection: 'keep-alive'}}, 'before the signal, keep-alive as usual');
	// Long enough to be in flight when the drain reaches the workers, in a loaded run too: they count as served.
	const slow = [1, 2].map(async () => client(url(proc.port, '/slow?ms=2500')));
	await proc.waitForLog('fixture request started', {count: 2});
	proc[send](signal);
	await proc.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: WORKERS});
	// At once, together: in a loaded run the reject phase's 3 s go by quickly.
	const [rejected, readiness, reused] = await Promise.all([client(url(proc.port, '/')), client(url(proc.port, '/readyz')), keepAlive.request('/hello')]);
	t.is(rejected.statusCode, 503, 'the reject phase answers 503: the app did not close its server at the signal');
	t.like(rejected.headers, {connection: 'close', 'retry-after': '1'});
	t.is(readiness.statusCode, 503, 'readiness fails from the signal on');
	t.like(reused, {status: 503, headers: {connection: 'close'}}, 'a keep-alive client is refused and told the connection ends');
	t.is(await keepAlive.closedByServer(), 'fin', 'then a FIN, not a reset');
	const finished = await Promise.all(slow);
	t.deepEqual(finished.map(response => response.statusCode), [200, 200], 'the requests in flight finish');
	const exit = await proc.exitWithin(15_000);
	t.like(exit, {code: 0, signal: null}, proc.text().slice(-4000));
	const done = cleanupDone(proc);
	t.is(done.length, WORKERS, `the cleanup's last step, once per worker:\n${proc.text().slice(-4000)}`);
	t.is(new Set(done.map(line => line['pid'])).size, WORKERS);
	const shutdowns = proc.lines.filter(line => line.msg === 'fixture shutdown');
	t.true(shutdowns.length >= WORKERS, 'the app\'s shutdown started in each worker');
	if (told !== undefined) {
		t.true(shutdowns.every(line => line['signal'] === told), `told ${told}: ${JSON.stringify(shutdowns.map(line => line['signal']))}`);
	}

	// In each worker, the app's shutdown began after its requests in flight were
	// done: one process's lines reach us in the order it wrote them.
	for (const shutdown of shutdowns) {
		const at = proc.lines.indexOf(shutdown);
		const pending = proc.lines.findIndex((line, index) => index > at && line.msg === 'fixture request finished' && line['pid'] === shutdown['pid']);
		t.is(pending, -1, `the app's shutdown ran after the requests in flight in ${String(shutdown['pid'])}`);
	}

	t.is(proc.lines.filter(line => line.msg === 'fixture request finished').length, 2);
	t.falsy(proc.lines.find(line => /ERR_SERVER_NOT_RUNNING|not running/i.test(JSON.stringify(line))), 'the app\'s own close of the drained server succeeds');
	const summary = drainFinished(proc);
	t.like(summary, {outcome: 'clean', exitCode: 0, hooksFailed: 0, workersLost: 0, responsesCut: 0, uncounted: []});
	t.true(Number(summary?.['served']) >= 2 && Number(summary?.['rejected']) >= 2, `counted: ${JSON.stringify(summary)}`);
	t.is(proc.lines.filter(line => line.msg === 'fixture cleanup' && line['step'] === 'pool ended').length, proc.lines.filter(line => line.msg === 'fixture cleanup' && line['step'] === 'pool ending').length, 'every pool that began to end, ended');
	return proc.lines;
}

test('Fastify + close-with-grace: the onClose hook (300 ms) runs to its end; close-with-grace\'s exit(0) ends the worker', async t => {
	await drainsCleanly(t, {name: 'close-with-grace', told: 'SIGTERM'});
});

test('Express with process.on(\'SIGTERM\', () => server.close(() => pool.end().then(() => process.exit(0)))): the pool ends (500 ms)', async t => {
	await drainsCleanly(t, {name: 'express-handler', told: 'SIGTERM'});
});

test('Express + terminus with its defaults (SIGTERM, a 1 s timeout): requests in flight longer than that timeout finish; then onSignal runs and its re-raised signal ends the worker', async t => {
	await drainsCleanly(t, {name: 'terminus-defaults', told: 'SIGTERM'});
});

test('Hapi: server.stop() and the pool (300 ms) run to their end after the requests in flight', async t => {
	await drainsCleanly(t, {name: 'hapi', told: 'SIGTERM'});
});

test('Koa: its server.close() callback and the pool (300 ms) run to their end; the worker ends by itself', async t => {
	await drainsCleanly(t, {name: 'koa', told: 'SIGTERM'});
});

test('a SIGTERM listener that exits at once (Next.js standalone, OpenTelemetry\'s tracing.js): it runs after a request in flight across the reject phase\'s end, which finishes; exit 0, counted', async t => {
	const proc = await startApp(t, 'exit-at-once', {rejectPeriod: '3s'});
	const slow = [1, 2].map(async () => client(url(proc.port, '/slow?ms=4500')));
	await proc.waitForLog('fixture request started', {count: 2});
	proc.kill('SIGTERM');
	await proc.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: WORKERS});
	t.like(await client(url(proc.port, '/')), {statusCode: 503, headers: {connection: 'close'}});
	t.deepEqual((await Promise.all(slow)).map(response => response.body), ['slow', 'slow'], 'not cut by the listener\'s exit');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-4000));
	for (const shutdown of proc.lines.filter(line => line.msg === 'fixture shutdown')) {
		const finished = proc.lines.findIndex(line => line.msg === 'fixture request finished' && line['pid'] === shutdown['pid']);
		t.true(finished !== -1 && finished < proc.lines.indexOf(shutdown), 'the listener ran after the request in flight');
	}

	const summary = drainFinished(proc);
	t.like(summary, {outcome: 'clean', exitCode: 0, served: 2, responsesCut: 0, workersLost: 0, uncounted: []});
	t.true(Number(summary?.['rejected']) >= 1);
});

test('lightship: its shutdown handler (300 ms) runs to its end, and the worker ends on its own as lightship expects', async t => {
	await drainsCleanly(t, {name: 'lightship'});
});

test('terminus: server.stop() succeeds on the drained server, onSignal and onShutdown run; its re-raised signal ends the worker', async t => {
	await drainsCleanly(t, {name: 'terminus'});
});

test('http-terminator: terminate() resolves on the drained server, the rest of the handler runs', async t => {
	await drainsCleanly(t, {name: 'http-terminator', told: 'SIGTERM'});
});

// attach() on a server the drain took already (after app.listen()), or takes
// first (before listen()): the same drain, nothing doubled.
for (const name of ['express-handler', 'terminus'] as const) {
	test(`${name} with attach(server) ${name === 'terminus' ? 'before' : 'after'} its listen(): the same drain, counted once`, async t => {
		await drainsCleanly(t, {name, told: name === 'terminus' ? undefined : 'SIGTERM', env: {FIXTURE_ATTACH: 'yes'}});
	});
}

test('stoppable: server.stop(callback) gets no error; the worker ends by itself once the pool has ended', async t => {
	await drainsCleanly(t, {name: 'stoppable', told: 'SIGTERM'});
});

test('NestJS enableShutdownHooks(), Ctrl-\\ to the process group: 503s, not refusals; onApplicationShutdown runs to its end with SIGQUIT', async t => {
	await drainsCleanly(t, {name: 'nestjs', send: 'killGroup', signal: 'SIGQUIT', told: 'SIGQUIT'});
});

test('NestJS, kill -HUP to the group: the reload serves throughout; each retiring worker runs onApplicationShutdown with SIGHUP, once', async t => {
	const proc = await startApp(t, 'nestjs');
	const before = proc.lines.filter(line => line.msg === 'fixture listening').map(line => line['pid']);
	let failures = 0;
	let served = 0;
	let running = true;
	const load = (async () => {
		while (running) {
			const response = await client(url(proc.port, '/slow?ms=0')).catch(() => undefined);
			if (response?.statusCode === 200) {
				served++;
			} else {
				failures++;
			}
		}
	})();
	try {
		await waitUntil(() => served >= 20, {timeout: 10_000, what: 'steady load'});
		proc.killGroup('SIGHUP');
		await proc.waitForLog('reload finished', {timeout: 30_000});
		await proc.waitForLog(line => line.msg === 'fixture cleanup' && line['step'] === 'done', {count: WORKERS, timeout: 15_000});
	} finally {
		running = false;
		await load;
	}

	t.is(failures, 0, `every request during the reload was served (${served} served)`);
	t.like(proc.lines.find(line => line.msg === 'reload started'), {signal: 'SIGHUP'});
	const shutdowns = proc.lines.filter(line => line.msg === 'fixture shutdown');
	t.deepEqual(shutdowns.map(line => line['signal']), ['SIGHUP', 'SIGHUP']);
	const sorted = (pids: unknown[]) => pids.map(Number).sort((a, b) => a - b);
	t.deepEqual(sorted(shutdowns.map(line => line['pid'])), sorted(before), 'in the retiring workers, once each');
	proc.kill('SIGTERM');
	t.is((await proc.exitWithin(15_000))?.code, 0, proc.text().slice(-3000));
});

test('gRPC (@grpc/grpc-js, no attach()): a call in flight finishes, a new call in the reject phase gets UNAVAILABLE without reaching the app, then its own tryShutdown() runs and the worker leaves', async t => {
	const grpc = await import('@grpc/grpc-js');
	const proc = await startApp(t, 'grpc', {rejectPeriod: '3s'});
	const Echo = grpc.makeGenericClientConstructor({
		echo: {
			path: '/test.Echo/Echo',
			requestStream: false,
			responseStream: false,
			requestSerialize: (value: unknown) => Buffer.from(JSON.stringify(value)),
			requestDeserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as unknown,
			responseSerialize: (value: unknown) => Buffer.from(JSON.stringify(value)),
			responseDeserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as unknown,
		},
	}, 'Echo');
	type EchoClient = {echo(request: unknown, callback: (error: (Error & {code?: number; details?: string}) | null, reply?: {pid: number}) => void): void; close(): void};
	const channel = new Echo(`127.0.0.1:${proc.port}`, grpc.credentials.createInsecure()) as unknown as EchoClient;
	t.teardown(() => {
		channel.close();
	});
	const call = async (client: EchoClient, ms: number) => new Promise<{pid: number}>((resolve, reject) => {
		client.echo({ms}, (error, reply) => {
			if (error) {
				reject(error);
			} else {
				resolve(reply!);
			}
		});
	});
	await call(channel, 0);
	const signalledAt = performance.now();
	const inFlight = call(channel, 2500);
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	await proc.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: WORKERS});
	// A new client, as a load balancer's new connection is: refused as gRPC says.
	const fresh = new Echo(`127.0.0.1:${proc.port}`, grpc.credentials.createInsecure()) as unknown as EchoClient;
	t.teardown(() => {
		fresh.close();
	});
	const refused = await call(fresh, 0).then(() => undefined, (error: Error & {code?: number; details?: string}) => error);
	t.like(refused, {code: grpc.status.UNAVAILABLE}, 'UNAVAILABLE (14), which gRPC clients retry elsewhere');
	t.regex(String(refused?.details), /shutting down/);
	t.truthy(await inFlight, 'the call in flight is answered');
	const exit = await proc.exitWithin(15_000);
	const tookMs = performance.now() - signalledAt;
	t.like(exit, {code: 0, signal: null}, proc.text().slice(-4000));
	t.true(tookMs < 12_000, `left after ${Math.round(tookMs)} ms, long before the 20 s deadline`);
	t.is(proc.lines.filter(line => line.msg === 'fixture shutdown').length, WORKERS, 'the listener ran once per worker');
	t.is(cleanupDone(proc).length, WORKERS, 'tryShutdown() completed in each worker');
	const summary = drainFinished(proc);
	t.like(summary, {outcome: 'clean', exitCode: 0, responsesCut: 0, uncounted: []});
	t.true(Number(summary?.['served']) >= 1 && Number(summary?.['rejected']) >= 1, JSON.stringify(summary));
});

test('attach() given a @grpc/grpc-js Server says what to do instead: a TypeError naming it', async t => {
	const grpc = await import('@grpc/grpc-js');
	const {attach} = await import('../../src/worker/index.js');
	const server = new grpc.Server();
	t.throws(() => attach(server as never), {instanceOf: TypeError, message: /@grpc\/grpc-js Server[^]*needs no attach\(\)[^]*tryShutdown/});
});

for (const name of ['terminus', 'express-handler'] as const) {
	test(`standalone (plain node, attach()): ${name}'s shutdown runs to its end after the drain; exit 0${name === 'terminus' ? ', its re-raised signal is not a second signal' : ''}`, async t => {
		// Under plain node only the servers passed to attach() are drained.
		const proc = start(t, [app(name)], {plainNode: true, env: {FIXTURE_ATTACH: 'yes', GRACEFUL_CLUSTER_REJECT_PERIOD: '300ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
		const {port} = await proc.waitForLog('fixture listening');
		const slow = client(url(Number(port), '/slow?ms=800'));
		await proc.waitForLog('fixture request started');
		proc.kill('SIGTERM');
		t.is((await slow).statusCode, 200);
		t.like(await proc.exitWithin(10_000), {code: 0}, proc.text());
		t.is(cleanupDone(proc).length, 1);
		t.like(proc.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
		t.falsy(proc.lines.find(line => line.msg === 'second signal during the drain; exiting now'));
	});
}

test('signal-exit beside the app\'s own cleanup: it sees that listener, so it does not re-raise; the cleanup runs to its end, then signal-exit\'s onExit', async t => {
	const lines = await drainsCleanly(t, {name: 'signal-exit', told: 'SIGTERM'});
	const onExit = lines.filter(line => line.msg === 'fixture onExit');
	t.is(onExit.length, WORKERS);
	t.true(onExit.every(line => line['code'] === 0), JSON.stringify(onExit));
});

test('a --require preload\'s SIGTERM listener (an APM agent\'s) is held too: the request in flight finishes first, then it runs; its exit 143 is a clean end', async t => {
	const proc = start(t, ['--workers', '1', '--reject-period', '500ms', '--grace-period', '20s', app('plain')], {env: {NODE_OPTIONS: `--require ${app('preload').replace(/\.mjs$/, '.cjs')}`}});
	const {port} = await proc.waitForLog('fixture listening', {timeout: 30_000});
	const slow = client(url(Number(port), '/slow?ms=1500'));
	await proc.waitForLog('fixture request started');
	proc.killGroup('SIGTERM');
	t.is((await slow).statusCode, 200, 'not cut by the preload\'s exit at the signal');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1);
	t.like(drainFinished(proc), {outcome: 'clean', hooksFailed: 0, workersLost: 0});
});

