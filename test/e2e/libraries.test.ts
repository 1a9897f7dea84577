// Apps that already shut themselves down, with the real libraries: their
// cleanup runs to its end, once per worker, after the requests in flight; the
// reject phase answers 503, never a refusal; the drain reports what happened.
// (test/fixtures/libraries/: one small app per library.)
import test from 'ava';
import type {ExecutionContext} from 'ava';
import {once} from 'node:events';
import http from 'node:http';
import net from 'node:net';
import {performance} from 'node:perf_hooks';
import {setTimeout as sleep} from 'node:timers/promises';
import {url} from '../../testkit/net.js';
import {waitUntil} from '../../testkit/proc.js';
import {fixture, start, type LogLine, type Proc} from '../helpers/cluster.js';
import {client, RawConnection, rawExchange, type RawResponse} from '../helpers/http.js';

const WORKERS = 2;
const app = (name: string): string => fixture(`libraries/${name}.mjs`);
const cleanupDone = (proc: Proc): LogLine[] => proc.lines.filter(line => line.msg === 'fixture cleanup' && line['step'] === 'done');
const drainFinished = (proc: Proc): LogLine | undefined => proc.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');

/** Starts the CLI on a library app; resolves with the app's port once every worker listens. */
async function startApp(t: ExecutionContext, name: string, {workers = WORKERS, options = [], env, rejectPeriod = '1500ms'}: {workers?: number; options?: string[]; env?: Record<string, string>; rejectPeriod?: string} = {}): Promise<Proc & {port: number}> {
	const proc = start(t, ['--workers', String(workers), '--reject-period', rejectPeriod, '--grace-period', '20s', ...options, app(name)], {env});
	const line = await proc.waitForLog('fixture listening', {count: workers, timeout: 30_000});
	return Object.assign(proc, {port: Number(line['port'])});
}

interface Scenario {
	readonly name: string;
	/** How the signal is sent: to the primary alone (Kubernetes) or to the whole group (a terminal, systemd). */
	readonly send?: 'kill' | 'killGroup';
	readonly signal?: NodeJS.Signals;
	/** The signal the app's cleanup is told, when it says. */
	readonly told?: string;
}

/**
 * Two slow requests in flight, then the signal: both finish, a new request
 * in the reject phase gets the drain 503, the app's cleanup runs to its end
 * once per worker after the slow requests, the drain is clean, exit 0.
 */
async function drainsCleanly(t: ExecutionContext, {name, send = 'kill', signal = 'SIGTERM', told}: Scenario): Promise<readonly LogLine[]> {
	// The request that must get the 503 is sent once both workers' 'rejecting new
	// requests' lines are read. In a loaded CI run (the whole suite on 2 cores) that
	// reading once came late enough for the request to miss a 1.5 s reject phase
	// and meet the worker's close: a hang-up, not a 503. 3 s leaves room.
	const proc = await startApp(t, name, {rejectPeriod: '3s'});
	const slow = [1, 2].map(async () => client(url(proc.port, '/slow?ms=1200')));
	await proc.waitForLog('fixture request started', {count: 2});
	proc[send](signal);
	await proc.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: WORKERS});
	const rejected = await client(url(proc.port, '/'));
	t.is(rejected.statusCode, 503, 'the reject phase answers 503: the app did not close its server at the signal');
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
	t.like(drainFinished(proc), {outcome: 'clean', exitCode: 0, hooksFailed: 0, workersLost: 0, responsesCut: 0});
	t.is(proc.lines.filter(line => line.msg === 'fixture cleanup' && line['step'] === 'pool ended').length, proc.lines.filter(line => line.msg === 'fixture cleanup' && line['step'] === 'pool ending').length, 'every pool that began to end, ended');
	return proc.lines;
}

test('Fastify + close-with-grace: the onClose hook (300 ms) runs to its end; close-with-grace\'s exit(0) ends the worker', async t => {
	await drainsCleanly(t, {name: 'close-with-grace', told: 'SIGTERM'});
});

test('Express with process.on(\'SIGTERM\', () => server.close(() => pool.end().then(() => process.exit(0)))): the pool ends (500 ms)', async t => {
	await drainsCleanly(t, {name: 'express-handler', told: 'SIGTERM'});
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
			// eslint-disable-next-line no-await-in-loop
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

test('gRPC without attach(): the app\'s own tryShutdown() runs when the reject phase ends, and the worker leaves before the deadline', async t => {
	const grpc = await import('@grpc/grpc-js');
	const proc = await startApp(t, 'grpc');
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
	const channel = new Echo(`127.0.0.1:${proc.port}`, grpc.credentials.createInsecure()) as unknown as {echo(request: unknown, callback: (error: Error | null, reply?: {pid: number}) => void): void; close(): void};
	t.teardown(() => {
		channel.close();
	});
	const call = async (ms: number) => new Promise<{pid: number}>((resolve, reject) => {
		channel.echo({ms}, (error, reply) => {
			if (error) {
				reject(error);
			} else {
				resolve(reply!);
			}
		});
	});
	await call(0);
	const signalledAt = performance.now();
	const inFlight = call(1000);
	proc.kill('SIGTERM');
	t.truthy(await inFlight, 'the call in flight is answered');
	const exit = await proc.exitWithin(15_000);
	const tookMs = performance.now() - signalledAt;
	t.like(exit, {code: 0, signal: null}, proc.text().slice(-4000));
	t.true(tookMs < 10_000, `left after ${Math.round(tookMs)} ms, long before the 20 s deadline`);
	t.is(proc.lines.filter(line => line.msg === 'fixture shutdown').length, WORKERS, 'the listener ran once per worker');
	t.is(cleanupDone(proc).length, WORKERS, 'tryShutdown() completed in each worker');
	t.like(drainFinished(proc), {outcome: 'clean', exitCode: 0});
});

const bigResponses = {
	GET: {text: 'GET / HTTP/1.1\r\nHost: x\r\n\r\n', what: 'a GET', env: {}},
	POST: {text: `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n${'b'.repeat(100_000)}`, what: 'a POST whose body the app never reads', env: {}},
	// Its headers go out after the signal, with the drain's `Connection: close`: Node
	// closes the socket itself once the response is out, the 8 MB upload unread.
	'POST, answered after the signal': {text: `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ${8 * 1024 * 1024}\r\n\r\n${'b'.repeat(8 * 1024 * 1024)}`, what: 'an 8 MB upload the app never reads, answered after the signal with Connection: close', env: {FIXTURE_DELAY_MS: '1000'}},
	// Node answers bytes that are not HTTP with a destroy: after the last response,
	// with the rest unread, that was a reset (found by a hostile trial).
	'POST, then garbage': {text: `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n${'b'.repeat(1_000_000)}${'a'.repeat(1_100_000)}`, what: 'a 1 MB upload the app never reads followed by 1.1 MB that is not HTTP, answered after the signal', env: {FIXTURE_DELAY_MS: '1000'}},
} as const;

for (const {text, what, env} of Object.values(bigResponses)) {
	test(`a response written in one go to a slow client is delivered whole: the end of the reject phase and of the drain do not cut it (${what})`, async t => {
		const proc = await startApp(t, 'big-response', {workers: 1, options: ['--reject-period', '500ms'], env});
		const net = await import('node:net');
		const socket = net.connect(proc.port, '127.0.0.1');
		t.teardown(() => socket.destroy());
		// The unread body sits in the worker's receive buffer when the socket is
		// closed: closing a socket with unread bytes in it is a reset, which throws
		// away the response's tail still in the send buffer.
		socket.write(text);
		const chunks: Buffer[] = [];
		socket.on('data', chunk => {
			chunks.push(chunk);
			// About 4 MB/s: the 16 MB body needs several seconds, well past the reject phase.
			socket.pause();
			setTimeout(() => socket.resume(), 15);
		});
		const closed = new Promise<string>(resolve => {
			socket.once('error', error => {
				resolve((error as NodeJS.ErrnoException).code ?? error.message);
			});
			socket.once('close', () => {
				resolve('close');
			});
		});
		await proc.waitForLog('fixture request started');
		proc.kill('SIGTERM');
		await proc.waitForLog('stopped listening; waiting for requests in flight');
		t.is(await closed, 'close', 'the connection ends with a FIN, not a reset');
		const received = Buffer.concat(chunks);
		const headerEnd = received.indexOf('\r\n\r\n');
		const length = Number(/content-length: (\d+)/i.exec(received.subarray(0, headerEnd).toString('latin1'))?.[1]);
		t.is(length, 16 * 1024 * 1024);
		t.is(received.length - headerEnd - 4, length, 'the whole body arrived');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
		t.like(drainFinished(proc), {outcome: 'clean', served: 1, aborted: 0, responsesCut: 0});
	});
}

for (const name of ['terminus', 'express-handler'] as const) {
	test(`standalone (plain node): ${name}'s shutdown runs to its end after the drain; exit 0${name === 'terminus' ? ', its re-raised signal is not a second signal' : ''}`, async t => {
		const proc = start(t, [app(name)], {plainNode: true, env: {GRACEFUL_CLUSTER_REJECT_PERIOD: '300ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
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

test('a reload with an app that re-reads its config on SIGHUP: the retiring workers run it and their SIGTERM cleanup, and leave at once', async t => {
	const proc = await startApp(t, 'config-reload');
	const before = proc.lines.filter(line => line.msg === 'fixture listening').map(line => Number(line['pid']));
	const startedAt = performance.now();
	proc.kill('SIGHUP');
	await proc.waitForLog('reload finished', {timeout: 30_000});
	await proc.waitForLog(line => line.msg === 'worker exited' && before.includes(Number(line['workerPid'])), {count: WORKERS, timeout: 15_000});
	const tookMs = performance.now() - startedAt;
	t.true(tookMs < 10_000, `the retiring workers left after ${Math.round(tookMs)} ms, not at the 20 s deadline`);
	t.falsy(proc.lines.find(line => line.msg === 'retiring worker still running at the deadline; killing it'));
	for (const pid of before) {
		t.like(proc.lines.find(line => line.msg === 'fixture config reloaded' && line['pid'] === pid), {signal: 'SIGHUP'});
		t.truthy(proc.lines.find(line => line.msg === 'fixture cleanup' && line['step'] === 'done' && line['pid'] === pid), `pool closed in ${pid}`);
	}

	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
});

test('a recycle (--max-requests): the retiring worker runs the app\'s SIGTERM cleanup, not its SIGHUP one, and leaves at once', async t => {
	const proc = await startApp(t, 'config-reload', {workers: 1, options: ['--max-requests', '3']});
	const [first] = proc.lines.filter(line => line.msg === 'fixture listening').map(line => Number(line['pid']));
	for (let index = 0; index < 4; index++) {
		// eslint-disable-next-line no-await-in-loop
		t.is((await client(url(proc.port, '/'))).statusCode, 200);
	}

	await proc.waitForLog(line => line.msg === 'worker exited' && Number(line['workerPid']) === first, {timeout: 15_000});
	t.like(proc.lines.find(line => line.msg === 'fixture shutdown' && line['pid'] === first), {signal: 'SIGTERM'});
	t.falsy(proc.lines.find(line => line.msg === 'fixture config reloaded'), 'no SIGHUP was sent to anyone');
	t.falsy(proc.lines.find(line => line.msg === 'retiring worker still running at the deadline; killing it'));
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
});

test('without attach(), a worker whose event loop is busy at the signal still runs the app\'s listener before it leaves', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, options: ['--reject-period', '300ms']});
	const busy = client(url(proc.port, '/busy'));
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	t.is((await busy).statusCode, 200);
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	t.truthy(proc.lines.find(line => line.msg === 'running the app\'s own signal listeners'), proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1, 'its cleanup ran to its end');
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

test('busy WebSockets and event streams at the reject phase\'s end: the close frame and the end go out behind the queued data, 1001 and clean ends, none cut', async t => {
	const {WebSocket} = await import('ws');
	const http = await import('node:http');
	const proc = await startApp(t, 'busy-long-lived', {workers: 1, options: ['--reject-period', '800ms']});
	const sockets = Array.from({length: 3}, () => new WebSocket(`ws://127.0.0.1:${proc.port}/ws`));
	t.teardown(() => {
		for (const socket of sockets) {
			socket.terminate();
		}
	});
	const codes = sockets.map(async socket => new Promise<number>(resolve => {
		socket.on('error', () => undefined);
		socket.on('close', code => {
			resolve(code);
		});
	}));
	const streams = [1, 2].map(async () => new Promise<{complete: boolean; bytes: number}>(resolve => {
		http.get(url(proc.port, '/events'), response => {
			let bytes = 0;
			let tail = '';
			response.on('data', (chunk: Buffer) => {
				bytes += chunk.length;
				tail = (tail + chunk.toString('latin1')).slice(-4);
			});
			response.on('end', () => {
				resolve({complete: response.complete && tail.endsWith('\n\n'), bytes});
			});
			response.on('aborted', () => {
				resolve({complete: false, bytes});
			});
		});
	}));
	await proc.waitForLog('fixture ws opened', {count: 3});
	await proc.waitForLog('fixture stream opened', {count: 2});
	proc.kill('SIGTERM');
	t.deepEqual(await Promise.all(codes), [1001, 1001, 1001], 'a close frame each, never 1006');
	for (const stream of await Promise.all(streams)) {
		t.true(stream.complete, `a whole stream, ended on an event boundary (${stream.bytes} bytes)`);
	}

	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	t.like(drainFinished(proc), {outcome: 'clean', closedLongLived: 5, longLivedCut: 0});
});

test('WebSockets closed by the drain, then a hook that ends the worker itself: the summary still counts them', async t => {
	const {WebSocket} = await import('ws');
	const proc = await startApp(t, 'busy-long-lived', {workers: 1, options: ['--reject-period', '500ms']});
	const sockets = Array.from({length: 2}, () => new WebSocket(`ws://127.0.0.1:${proc.port}/ws`));
	t.teardown(() => {
		for (const socket of sockets) {
			socket.terminate();
		}
	});
	await proc.waitForLog('fixture ws opened', {count: 2});
	// SIGINT: the fixture's own listener for it ends the process (process.exit(0)).
	proc.kill('SIGINT');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	// What this test holds: both are counted although a hook ended the worker.
	// Whether a busy socket's close finished within 2 s depends on how fast this
	// process reads (a loaded CI machine: one was cut); the busy-connection test
	// above holds that part.
	const finished = drainFinished(proc);
	t.like(finished, {closedLongLived: 2});
	t.true(Number(finished?.['longLivedCut']) <= 2, 'any cut is among the closed ones');
});

// A SIGTERM a few ms after a SIGHUP, while the reload's new worker is still
// loading: its reject phase ends before the app is up. A worker that had not
// attached then was disconnected at once, and its app came up in a worker that
// could no longer listen (node:cluster neither calls back nor fails): shutdown
// code set up once listening (lightship; a listener registered in the listen
// callback) never was, a listener registered before listen() was never called,
// http-terminator's terminate() rejected on the server that never ran; either
// way the worker waited for the deadline's kill (exit 3, "1 worker lost").
const slowStarts = [
	{name: 'http-terminator'},
	{name: 'lightship', why: 'its signal listeners come once its probe server listens'},
	{name: 'no-attach-pool', why: 'no attach()'},
	{name: 'no-attach-pool', why: 'no attach(), its listener registered in the listen callback', env: {FIXTURE_LISTENER: 'in-listen-callback'}},
	{name: 'late-second-server', why: 'no attach(), a metrics server listens first, the app server 500 ms later'},
	{name: 'shutdown-two-signals', why: 'no attach(), one shutdown function for SIGINT, then SIGTERM a turn later: it runs once'},
] as const;
for (const {name, why, env} of slowStarts as ReadonlyArray<{name: string; why?: string; env?: Record<string, string>}>) {
	test(`SIGTERM while a reload's new worker is still loading (${name}${why ? `: ${why}` : ''}): once its app is up its cleanup runs to its end and it leaves; exit 0, not the deadline`, async t => {
		const proc = start(t, ['--workers', '1', '--reject-period', '500ms', '--grace-period', '10s', app('slow-start')], {env: {FIXTURE_APP: name, FIXTURE_SLOW_FROM: '2', FIXTURE_START_MS: '1500', ...env}});
		await proc.waitForLog('fixture listening', {timeout: 30_000});
		proc.kill('SIGHUP');
		const loading = await proc.waitForLog('fixture loading', {timeout: 15_000});
		proc.kill('SIGTERM');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-4000));
		const candidate = loading['pid'];
		t.truthy(cleanupDone(proc).find(line => line['pid'] === candidate), `the new worker's cleanup ran to its end:\n${proc.text().slice(-4000)}`);
		t.like(proc.lines.find(line => line.msg === 'worker exited' && line['workerPid'] === candidate), {code: 0, signal: null, reason: 'drain'});
		// Without attach() nobody counts the requests: whether the app's own exit cut any is not known.
		t.like(drainFinished(proc), {outcome: 'clean', exitCode: 0, workersLost: 0, hooksFailed: 0, responsesCut: why?.startsWith('no attach()') ? null : 0});
		t.falsy(proc.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'), proc.text().slice(-4000));
	});
}

// A worker without attach() runs the app's listeners when the reject phase ends,
// which is when the primary disconnects it: a failure after that could not be
// sent, and the drain read clean (exit 0, hooksFailed 0).
for (const fail of ['reject', 'throw'] as const) {
	test(`without attach(), a listener that fails (${fail === 'reject' ? 'rejects after its cleanup' : 'throws at once'}) is counted: hooksFailed, exit 7, no worker lost`, async t => {
		const proc = await startApp(t, 'no-attach-failing', {workers: 1, options: ['--reject-period', '300ms'], env: {FIXTURE_FAIL: fail}});
		proc.kill('SIGTERM');
		t.like(await proc.exitWithin(15_000), {code: 7, signal: null}, proc.text().slice(-3000));
		t.truthy(proc.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'));
		t.like(drainFinished(proc), {outcome: 'hooks-failed', exitCode: 7, hooksFailed: 1, workersLost: 0, responsesCut: null});
		// 7 when the failure came after the primary's disconnect, which says it then; 0 when its message got there first.
		const exited = proc.lines.find(line => line.msg === 'worker exited');
		t.like(exited, {reason: 'drain'});
		t.true([0, 7].includes(exited?.['code'] as number), JSON.stringify(exited));
	});
}

test('without attach(), a listener that arms "a second SIGTERM forces the exit" during its shutdown: that one is not called, the cleanup runs to its end, exit 0', async t => {
	const proc = await startApp(t, 'force-exit', {workers: 1, options: ['--reject-period', '300ms']});
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1);
	t.falsy(proc.lines.find(line => line.msg === 'fixture forced exit'));
	t.like(drainFinished(proc), {outcome: 'clean', workersLost: 0});
});

test('without attach(), a shutdown registered lazily after the reject phase ended, in two pieces a few hundred ms apart: both run, exit 0', async t => {
	const proc = await startApp(t, 'lazy-listeners', {workers: 1, options: ['--reject-period', '300ms', '--grace-period', '10s']});
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1, proc.text().slice(-3000));
	t.like(drainFinished(proc), {outcome: 'clean', workersLost: 0});
});

// The same libraries in an app that never calls attach() (the basic drain).
// node:cluster's disconnect at the reject phase's end closes the server, and
// the app's own shutdown, which runs then, closes it again: Node's
// ERR_SERVER_NOT_RUNNING made terminus and stoppable exit 1 with their
// cleanup undone (exit 5) and http-terminator's terminate() reject, leaving
// the worker to the deadline (exit 3). And a keep-alive client that kept
// sending held lightship's server.close() callback until the deadline.
const unattached = ['close-with-grace', 'terminus', 'lightship', 'http-terminator', 'stoppable', 'nestjs'] as const;
for (const name of unattached) {
	test(`without attach(), ${name}: its second close succeeds and its cleanup runs to its end; a keep-alive client is told Connection: close and gets a FIN; exit 0`, async t => {
		const proc = await startApp(t, name, {env: {FIXTURE_ATTACH: 'no'}, rejectPeriod: '1s'});
		const keepAlive = await RawConnection.open(proc.port);
		t.teardown(() => {
			keepAlive.close();
		});
		const before = await keepAlive.request('/hello');
		t.like(before, {status: 200, headers: {connection: 'keep-alive'}}, 'before the signal, keep-alive as usual');
		const slow = [1, 2].map(async () => client(url(proc.port, '/slow?ms=1200')));
		await proc.waitForLog('fixture request started', {count: 2});
		proc.kill('SIGTERM');
		// One request after another on the same connection, as a busy keep-alive
		// client sends them, until a response says the connection ends.
		const statuses: number[] = [];
		let last: RawResponse;
		do {
			// eslint-disable-next-line no-await-in-loop
			last = await keepAlive.request('/hello');
			statuses.push(last.status);
		} while (last.headers['connection'] !== 'close');
		t.true(statuses.every(status => status === 200), `served until its connection closed: ${statuses.join(' ')}`);
		t.is(await keepAlive.closedByServer(), 'fin', 'the connection ends with a FIN after the response that said so, not a reset');
		t.deepEqual((await Promise.all(slow)).map(response => response.statusCode), [200, 200], 'the requests in flight finish');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-4000));
		t.is(cleanupDone(proc).length, WORKERS, `the cleanup's last step, once per worker:\n${proc.text().slice(-4000)}`);
		t.falsy(proc.lines.find(line => /ERR_SERVER_NOT_RUNNING|not running/i.test(JSON.stringify(line))), proc.text().slice(-4000));
		t.like(drainFinished(proc), {outcome: 'clean', exitCode: 0, hooksFailed: 0, workersLost: 0});
	});
}

test('without attach(), from the drain on: an upload answered without being read gets its answer, pipelined POSTs each theirs, a POST pipelined behind a GET too; a GET is told Connection: close', async t => {
	// Long enough for an 8 MB upload in a loaded CI run: the port closes when it ends.
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '8s'});
	const keepAlive = await RawConnection.open(proc.port);
	t.teardown(() => {
		keepAlive.close();
	});
	proc.kill('SIGTERM');
	// The drain has reached the worker once a GET is told the connection ends.
	let last: RawResponse;
	do {
		// eslint-disable-next-line no-await-in-loop
		last = await keepAlive.request('/hello');
	} while (last.headers['connection'] !== 'close');
	// Node closes a Connection: close socket as soon as the response is out,
	// the body unread: a reset that would throw the 401 away.
	const size = 8 * 1024 * 1024;
	const upload = await rawExchange(proc.port, `POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: ${size}\r\n\r\n${'b'.repeat(size)}`, {until: received => received.includes('unauthorized')});
	t.regex(upload.received, /^HTTP\/1\.1 401 /, 'the answer to the unread upload arrives');
	t.notRegex(upload.received, /connection: close/i);
	// A request pipelined behind one told Connection: close runs, and its response is thrown away: only an idempotent one is told.
	const post = 'POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n';
	const pipelined = await rawExchange(proc.port, post + post, {until: received => received.split('hello').length === 3});
	t.is(pipelined.received.match(/HTTP\/1\.1 200 /g)?.length, 2, pipelined.received);
	// A POST pipelined behind a GET still being answered: the GET, told the connection ends, keeps it after all.
	const behindGet = await rawExchange(proc.port, 'GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n' + post, {until: received => received.includes('hello')});
	t.regex(behindGet.received, /^HTTP\/1\.1 200 [^]*\r\n\r\nslowHTTP\/1\.1 200 [^]*\r\n\r\nhello$/, behindGet.received);
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
});

test('without attach(), a keep-alive response still on its way across the reject phase\'s end is told Connection: close: the worker leaves when it is out, not at keepAliveTimeout (65 s) or the deadline', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '500ms', env: {FIXTURE_KEEP_ALIVE_MS: '65000'}});
	const keepAlive = await RawConnection.open(proc.port);
	t.teardown(() => {
		keepAlive.close();
	});
	const slow = keepAlive.request('/slow?ms=1500');
	await proc.waitForLog('fixture request started');
	const signalledAt = performance.now();
	proc.kill('SIGTERM');
	t.like(await slow, {status: 200, headers: {connection: 'close'}});
	t.is(await keepAlive.closedByServer(), 'fin');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	const tookMs = performance.now() - signalledAt;
	t.true(tookMs < 5000, `left ${Math.round(tookMs)} ms after the signal`);
});

// A server's 'close' is an app's cue to end what the server used (a pool, a
// tracer): one that is not idempotent throws at a second. Node emits it once
// per close() that finds nothing left, so each close the drain adds itself,
// after node:cluster's, is one the app would see twice.
const closesOnce = [
	{title: 'at a SIGTERM', closes: false, reload: false},
	{title: 'at a SIGTERM, the app closing its server itself', closes: true, reload: false},
	{title: 'at a reload, then a SIGTERM, the app closing its server itself', closes: true, reload: true},
];
for (const {title, closes, reload} of closesOnce) {
	test(`without attach(), the server's 'close' fires once per worker ${title}; an app that throws at a second exits 0`, async t => {
		const env: Record<string, string> = {FIXTURE_STRICT_CLOSE: '1', ...(closes ? {FIXTURE_CLOSE_ON_SIGTERM: '1'} : {})};
		const proc = await startApp(t, 'no-attach', {rejectPeriod: '500ms', env});
		if (reload) {
			proc.kill('SIGHUP');
			await proc.waitForLog('reload finished', {timeout: 30_000});
			// The retired workers' closes are out once both have exited.
			await proc.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {count: WORKERS, timeout: 15_000});
		}

		proc.kill('SIGTERM');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-4000));
		const closed = proc.lines.filter(line => line.msg === 'fixture server closed');
		const workers = reload ? 2 * WORKERS : WORKERS;
		t.deepEqual(closed.map(line => line['count']), Array.from({length: workers}, () => 1), proc.text().slice(-4000));
		t.is(new Set(closed.map(line => line['pid'])).size, workers);
		if (closes) {
			t.deepEqual(proc.lines.filter(line => line.msg === 'fixture server close callback').map(line => line['error']), Array.from({length: workers}, () => null));
		}

		t.like(drainFinished(proc), {exitCode: 0, hooksFailed: 0, workersLost: 0});
	});
}

// A client may send a request behind one still being answered (HTTP/1.1
// pipelining: undici's pipelining option, some proxies). Node runs it in the app
// at once; told Connection: close, the first response would end the
// connection, and the second, the POST's, ran but was thrown away.
for (const signal of ['SIGTERM', 'SIGHUP'] as const) {
	test(`without attach(), a ${signal} while a GET is answered with a POST pipelined behind it: both responses arrive, then the connection closes`, async t => {
		const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '500ms', env: {FIXTURE_KEEP_ALIVE_MS: '65000'}});
		const connection = await RawConnection.open(proc.port);
		t.teardown(() => {
			connection.close();
		});
		connection.socket.write('GET /slow?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\nPOST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc');
		await proc.waitForLog('fixture request started');
		const signalledAt = performance.now();
		proc.kill(signal);
		t.like(await connection.readResponse(), {status: 200, body: 'slow'});
		t.like(await connection.readResponse(), {status: 200, body: 'hello'});
		// Its last responses out and its client quiet for 1 s, the connection is closed: the worker need not wait for the client or keepAliveTimeout (65 s).
		t.is(await connection.closedByServer(), 'fin');
		if (signal === 'SIGHUP') {
			await proc.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {timeout: 15_000});
		}

		const tookMs = performance.now() - signalledAt;
		t.true(tookMs < 8000, `the worker left ${Math.round(tookMs)} ms after the signal`);
		if (signal === 'SIGHUP') {
			proc.kill('SIGTERM');
		}

		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	});
}

test('without attach(), a response streaming at a reload, its headers out already: the retired worker closes the connection once it is out and leaves, not at keepAliveTimeout (65 s)', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '500ms', env: {FIXTURE_KEEP_ALIVE_MS: '65000'}});
	const agent = new http.Agent({keepAlive: true});
	t.teardown(() => {
		agent.destroy();
	});
	const streaming = client(url(proc.port, '/stream'), {agent: {http: agent}});
	await proc.waitForLog('fixture request started');
	const signalledAt = performance.now();
	proc.kill('SIGHUP');
	const response = await streaming;
	t.is(response.statusCode, 200);
	t.true(response.body.endsWith('chunk 20\nend\n'), response.body);
	t.is(response.headers.connection, 'keep-alive', 'its headers were out before the reload: too late to say the connection ends');
	await proc.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {timeout: 15_000});
	const tookMs = performance.now() - signalledAt;
	t.true(tookMs < 8000, `the retired worker left ${Math.round(tookMs)} ms after the signal`);
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
});

const SLOW_READ_SIZE = 8 * 1024 * 1024;

/**
 * A raw keep-alive connection that reads about 4 MB a second, so that the end
 * of an 8 MB response is still in the kernel's buffers when the server is done
 * with it: how many bytes came, the last ones as text, and a reset if any.
 */
async function slowReader(t: ExecutionContext, port: number) {
	const socket = net.connect(port, '127.0.0.1');
	t.teardown(() => {
		socket.destroy();
	});
	await once(socket, 'connect');
	const read = {socket, received: 0, tail: '', error: undefined as string | undefined, closed: once(socket, 'close')};
	socket.on('error', (cause: NodeJS.ErrnoException) => {
		read.error = cause.code;
	});
	socket.on('data', (chunk: Buffer) => {
		read.received += chunk.length;
		read.tail = (read.tail + chunk.toString('latin1', Math.max(0, chunk.length - 200))).slice(-400);
		socket.pause();
		setTimeout(() => socket.resume(), chunk.length / 4096);
	});
	return read;
}

test('without attach(), a slow reader of an 8 MB keep-alive response sends its next request 200 ms after the server wrote the last bytes: it gets all 8 MB and the answer, then the connection closes', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '300ms'});
	const reader = await slowReader(t, proc.port);
	reader.socket.write('GET /big HTTP/1.1\r\nHost: x\r\n\r\n');
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	// Its headers went out keep-alive, before the drain: the client may send another
	// request, and does, 200 ms after the server's 'finish' (part of the scenario, not
	// a wait: a client still reading, or one that reads the response whole first).
	await proc.waitForLog('fixture request finished', {timeout: 15_000});
	await sleep(200);
	t.true(reader.received < SLOW_READ_SIZE, `still reading: ${reader.received} bytes so far`);
	reader.socket.write('GET /hello HTTP/1.1\r\nHost: x\r\n\r\n');
	await reader.closed;
	t.is(reader.error, undefined, 'no reset');
	t.true(reader.received > SLOW_READ_SIZE, `received ${reader.received} bytes`);
	t.regex(reader.tail, /\r\n\r\nhello$/, 'the request sent after the last bytes is answered');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
});

test('without attach(), a request a keep-alive client sends as the connection\'s FIN reaches it (the keep-alive race) never runs in the app: its answer could not arrive', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '300ms'});
	const socket = net.connect({port: proc.port, host: '127.0.0.1', allowHalfOpen: true});
	t.teardown(() => {
		socket.destroy();
	});
	await once(socket, 'connect');
	let received = '';
	socket.setEncoding('latin1');
	socket.on('data', (chunk: string) => {
		received += chunk;
	});
	// Its headers out before the drain: the response cannot say that the connection ends.
	socket.write('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n');
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	await once(socket, 'end');
	t.regex(received, /chunk 20\n[^]*end\n\r\n0\r\n\r\n$/, 'the whole stream');
	// Sent as the FIN arrives, as a client that had not seen it yet would.
	socket.end('POST /slow?ms=10 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.is(proc.lines.filter(line => line.msg === 'fixture request started').length, 1, 'the request after the FIN did not run');
	t.notRegex(received, /slow/);
});

test('without attach(), a slow reader of an 8 MB response the app ended in one write, across SIGTERM: every byte arrives, then the connection closes', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '300ms'});
	const reader = await slowReader(t, proc.port);
	reader.socket.write('GET /big-at-once HTTP/1.1\r\nHost: x\r\n\r\n');
	await proc.waitForLog('fixture request started');
	// The disconnect comes while most of it is still in the socket's buffer.
	proc.kill('SIGTERM');
	await reader.closed;
	t.is(reader.error, undefined, 'no reset');
	t.true(reader.received > SLOW_READ_SIZE, `received ${reader.received} of ${SLOW_READ_SIZE} bytes and the headers`);
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
});
