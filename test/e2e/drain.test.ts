// The core timeline after SIGTERM, end to end: real CLI, real workers, real clients.
import test from 'ava';
import {performance} from 'node:perf_hooks';
import {fixture, isAlive, startCluster} from '../helpers/cluster.js';
import {client, RawConnection} from '../helpers/http.js';

const url = (port: number, path: string) => `http://127.0.0.1:${port}${path}`;

test('SIGTERM: probes flip, new requests get 503 + Connection: close + Retry-After, in-flight requests finish, exit 0 after the reject phase', async t => {
	const rejectMs = 1500;
	const app = await startCluster(t, ['--reject-period', `${rejectMs}ms`, '--grace-period', '10s'], fixture('app.mjs'));

	// Before the signal: both probes 200, the app answers.
	t.is((await client(url(app.port, '/readyz'))).statusCode, 200);
	t.is((await client(url(app.port, '/livez'))).statusCode, 200);
	t.is((await client(url(app.port, '/'))).body, 'hello');

	// A keep-alive connection opened before the signal, idle when it comes.
	const keepAlive = await RawConnection.open(app.port);
	const first = await keepAlive.request('/');
	t.is(first.status, 200);
	t.not(first.headers['connection'], 'close');

	// A request in flight when the signal comes.
	const slow = client(url(app.port, '/slow?ms=2500&id=inflight'));
	await app.waitForLog('fixture request started');

	const signalledAt = app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started', {count: 2});

	// A new request on a new connection: rejected before the app sees it.
	const rejected = await client(url(app.port, '/'));
	t.is(rejected.statusCode, 503);
	t.is(rejected.headers['connection'], 'close');
	t.is(rejected.headers['retry-after'], '1');
	t.regex(rejected.body, /shutting down/);

	// The idle keep-alive connection: its next request gets the 503, never a reset,
	// and the server then closes it cleanly.
	const onKeepAlive = await keepAlive.request('/');
	t.is(onKeepAlive.status, 503);
	t.is(onKeepAlive.headers['connection'], 'close');
	t.is(onKeepAlive.headers['retry-after'], '1');
	t.is(await keepAlive.closedByServer(), 'fin');

	// Probes during the drain: readiness 503, liveness 200.
	t.is((await client(url(app.port, '/readyz'))).statusCode, 503);
	t.is((await client(url(app.port, '/livez'))).statusCode, 200);

	// The in-flight request completes with its whole body, and its connection closes.
	const done = await slow;
	const slowDoneAt = performance.now();
	t.is(done.statusCode, 200);
	t.is(done.body.length, 100_000);
	t.is(done.headers['connection'], 'close');

	const progress = await app.waitForLog('drain progress');
	t.true(typeof progress['inflight'] === 'number');

	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	// Not before the reject phase ends; promptly after the last request.
	t.true(exit.at - signalledAt >= rejectMs, `exited ${Math.round(exit.at - signalledAt)} ms after the signal`);
	t.true(exit.at - Math.max(slowDoneAt, signalledAt + rejectMs) < 1000, `exited ${Math.round(exit.at - slowDoneAt)} ms after the last response`);

	const hooks = app.lines.filter(line => line.msg === 'fixture shutdown hook');
	t.is(hooks.length, 2);
	const finished = app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');
	t.like(finished, {outcome: 'clean', exitCode: 0});
	t.true(Number(finished?.['served']) >= 1);
	t.true(Number(finished?.['rejected']) >= 2);
	t.is(app.lines.filter(line => line.msg === 'worker drained').length, 2);
});

test('the deadline: a request that never ends is cut off on time, workers are SIGKILLed, exit 3', async t => {
	const graceMs = 2500;
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', `${graceMs}ms`], fixture('app.mjs'));
	const workerPids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
	const hanging = client(url(app.port, '/hang')).catch((error: unknown) => error);
	await app.waitForLog('fixture request started');

	const signalledAt = app.kill('SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 3, app.text());
	const elapsed = exit.at - signalledAt;
	t.true(elapsed >= graceMs && elapsed < graceMs + 1000, `exited ${Math.round(elapsed)} ms after the signal`);

	const killed = app.lines.filter(line => line.msg === 'killing worker');
	t.is(killed.length, 1, 'only the worker still holding a request is left at the deadline');
	t.like(killed[0], {inflight: 1, reason: 'deadline'});
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'forced', exitCode: 3});
	for (const pid of workerPids) {
		t.false(isAlive(pid), `worker ${pid} is gone`);
	}

	t.truthy(await hanging, 'the hanging request failed when its worker was killed');
});

test('serve period: new requests are served with Connection: close, then rejected', async t => {
	const app = await startCluster(t, ['--serve-period', '1s', '--reject-period', '1s', '--grace-period', '10s'], fixture('app.mjs'));
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started', {count: 2});

	const served = await client(url(app.port, '/'));
	t.is(served.statusCode, 200);
	t.is(served.body, 'hello');
	t.is(served.headers['connection'], 'close');
	t.is((await client(url(app.port, '/readyz'))).statusCode, 503, 'readiness fails from the first moment');

	await app.waitForLog('rejecting new requests', {count: 2});
	const rejected = await client(url(app.port, '/'));
	t.is(rejected.statusCode, 503);
	t.is(rejected.headers['retry-after'], '1');

	t.is((await app.exited).code, 0, app.text());
});

test('a worker that never calls attach() gets the basic drain: served until the reject phase ends, then disconnected', async t => {
	const app = await startCluster(t, ['--reject-period', '800ms', '--grace-period', '10s'], fixture('app.mjs'), {env: {FIXTURE_NO_ATTACH: '1'}});
	app.kill('SIGTERM');
	await app.waitForLog('drain started');
	t.is((await client(url(app.port, '/'))).statusCode, 200, 'no filter without the helper');
	await app.waitForLog('disconnecting a worker that did not attach graceful-cluster', {count: 2});
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean'});
});
