// The core timeline after SIGTERM, end to end: real CLI, real workers, real clients.
import test from 'ava';
import {performance} from 'node:perf_hooks';
import {RequestError} from 'got';
import {url} from '../../testkit/net.js';
import {isAlive} from '../../testkit/proc.js';
import {fixture, start, startCluster} from '../helpers/cluster.js';
import {client, RawConnection} from '../helpers/http.js';

test('SIGTERM: probes flip, new requests get 503 + Connection: close + Retry-After, in-flight requests finish, exit 0 after the reject phase', async t => {
	// Long enough for every check below to land inside the reject phase on a busy machine.
	const rejectMs = 3000;
	const app = await startCluster(t, ['--reject-period', `${rejectMs}ms`, '--grace-period', '15s', '--log-level', 'debug'], fixture('app.mjs'));

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
	const slow = client(url(app.port, '/slow?ms=4500&id=inflight'));
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
	t.is(progress['inflight'], 1, 'the slow request, reported by its worker');
	t.is(Object.keys(progress['workers'] as object).length, 2);

	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	// Not before the reject phase ends; promptly after the last request.
	t.true(exit.at - signalledAt >= rejectMs, `exited ${Math.round(exit.at - signalledAt)} ms after the signal`);
	t.true(exit.at - Math.max(slowDoneAt, signalledAt + rejectMs) < 1000, `exited ${Math.round(exit.at - slowDoneAt)} ms after the last response`);

	const hooks = app.lines.filter(line => line.msg === 'fixture shutdown hook');
	t.is(hooks.length, 2);
	const finished = app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');
	// Served: the slow request. Rejected: the new connection's and the keep-alive one's (probes do not count).
	t.like(finished, {outcome: 'clean', exitCode: 0, served: 1, rejected: 2});
	t.is(app.lines.filter(line => line.msg === 'worker drained').length, 2);
	// One debug line per rejected request, and the per-second summary at info.
	const rejectedLines = app.lines.filter(line => line.msg === 'request rejected');
	t.is(rejectedLines.length, 2);
	t.like(rejectedLines[0], {level: 'debug', method: 'GET', path: '/'});
	t.truthy(rejectedLines[0]?.['remote']);
	const summaries = app.lines.filter(line => line.msg === 'rejected requests while draining');
	t.is(summaries.reduce((sum, line) => sum + Number(line['rejectedRecently']), 0), 2);
});

test('a response in flight that closes during the drain without completing counts as aborted, never as served: the client left, the app destroyed it; a whole one is served', async t => {
	const app = await startCluster(t, ['--reject-period', '1s', '--grace-period', '15s'], fixture('app.mjs'), {workers: 1});
	// Each ends when the drain starts: the app ends one, destroys one; the test's client leaves the third.
	const whole = client(url(app.port, '/on-drain?then=end'));
	const destroyed = client(url(app.port, '/on-drain?then=destroy')).catch((error: unknown) => error);
	const leaving = await RawConnection.open(app.port);
	t.teardown(() => {
		leaving.close();
	});
	leaving.socket.write('GET /hang HTTP/1.1\r\nHost: x\r\n\r\n');
	await app.waitForLog('fixture request started', {count: 3});

	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests');
	leaving.close();

	const done = await whole;
	t.is(done.statusCode, 200);
	t.is(done.body, 'started\nended on drain\n');
	t.true(await destroyed instanceof RequestError, 'the destroyed response failed at its client');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'worker drained'), {served: 1, aborted: 2, rejected: 0});
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {served: 1, aborted: 2, rejected: 0});
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

	const failure = await hanging;
	t.true(failure instanceof RequestError, 'the hanging request failed when its worker was killed');
	t.is((failure as RequestError).code, 'ECONNRESET');
});

test('serve period: new requests are served with Connection: close, then rejected', async t => {
	const app = await startCluster(t, ['--serve-period', '3s', '--reject-period', '2s', '--grace-period', '10s'], fixture('app.mjs'));
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

test('with --auto-attach off, a worker whose app never calls attach() gets the basic drain: served until the reject phase ends, then disconnected; the summary says nothing was counted', async t => {
	const app = await startCluster(t, ['--auto-attach', 'off', '--reject-period', '2s', '--grace-period', '10s'], fixture('app.mjs'), {env: {FIXTURE_NO_ATTACH: '1'}});
	app.kill('SIGTERM');
	await app.waitForLog('drain started');
	t.is((await client(url(app.port, '/'))).statusCode, 200, 'no filter: the drain took no server');
	await app.waitForLog('disconnecting a worker that did not attach graceful-cluster', {count: 2});
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'uncounted', exitCode: 0, served: null, rejected: null, responsesCut: null, uncounted: [`*:${app.port}`]});
});

test('the same app with the defaults: its server is drained without attach(): the reject phase answers 503, the summary counts', async t => {
	const app = await startCluster(t, ['--reject-period', '1500ms', '--grace-period', '10s'], fixture('app.mjs'), {env: {FIXTURE_NO_ATTACH: '1'}});
	const slow = client(url(app.port, '/slow?ms=2500'));
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});
	t.like(await client(url(app.port, '/')), {statusCode: 503, headers: {connection: 'close', 'retry-after': '1'}});
	t.is((await client(url(app.port, '/readyz'))).statusCode, 503);
	t.is((await slow).statusCode, 200, 'the request in flight, past the reject phase\'s end');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0, served: 1, rejected: 1, responsesCut: 0, uncounted: []});
});

test('with nothing in flight the drain still lasts the whole reject phase, then stops listening and closes idle keep-alive connections', async t => {
	const rejectMs = 1500;
	const app = await startCluster(t, ['--reject-period', `${rejectMs}ms`, '--grace-period', '10s'], fixture('app.mjs'));
	const idle = await RawConnection.open(app.port);
	t.is((await idle.request('/')).status, 200);
	const signalledAt = app.kill('SIGTERM');
	t.is(await idle.closedByServer(), 'fin', 'an idle keep-alive connection is closed, not reset');
	t.true(performance.now() - signalledAt >= rejectMs, 'but not before the reject phase ends');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	const elapsed = exit.at - signalledAt;
	t.true(elapsed >= rejectMs && elapsed < rejectMs + 1000, `exited ${Math.round(elapsed)} ms after the signal`);
});

test('at the end of the reject phase the workers stop listening: new connections are refused while a request still runs', async t => {
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '10s'], fixture('app.mjs'));
	const slow = client(url(app.port, '/slow?ms=3000'));
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog('stopped listening; waiting for requests in flight', {count: 2});
	await t.throwsAsync(client(url(app.port, '/')), {code: 'ECONNREFUSED'});
	t.is((await slow).statusCode, 200);
	t.is((await app.exited).code, 0, app.text());
});

test('with --auto-attach off, a worker with no drained server that still holds a request at the deadline is killed: exit 3', async t => {
	const app = await startCluster(t, ['--auto-attach', 'off', '--reject-period', '300ms', '--grace-period', '2s'], fixture('app.mjs'), {env: {FIXTURE_NO_ATTACH: '1'}});
	void client(url(app.port, '/hang')).catch(() => undefined);
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 3, app.text());
	t.like(app.lines.find(line => line.msg === 'killing worker'), {reason: 'deadline', inflight: null});
});

// An app that attaches, then waits for its database before it listens, and
// gets the drain meanwhile: its closing phase comes before its server listens.
test('a drain before the attached server listens: the app\'s own close() succeeds, and a listen that comes during the hooks is closed at once', async t => {
	// Listens 1 s after attaching, while its 2.5 s hook runs; its own listener closes the server after.
	const late = start(t, ['-w', '1', '--reject-period', '300ms', '--grace-period', '15s', fixture('late-listen.mjs')], {env: {FIXTURE_LISTEN_DELAY_MS: '1000', FIXTURE_HOOK_MS: '2500'}});
	await late.waitForLog('fixture attached', {timeout: 30_000});
	late.kill('SIGTERM');
	await late.waitForLog('fixture listening', {timeout: 15_000});
	t.like(await late.exitWithin(15_000), {code: 0, signal: null}, late.text().slice(-3000));
	const closedAt = late.lines.findIndex(line => line.msg === 'a server began to listen after this worker had stopped listening (it was still starting at the drain); closing it');
	t.true(closedAt !== -1, late.text().slice(-3000));
	t.true(closedAt < late.lines.findIndex(line => line.msg === 'fixture hook done'), 'closed as it listened, not after the hooks');
	t.like(late.lines.find(line => line.msg === 'fixture server closed'), {error: null});

	// Never listens before the worker leaves: the app's close() is not told ERR_SERVER_NOT_RUNNING.
	const never = start(t, ['-w', '1', '--reject-period', '300ms', '--grace-period', '15s', fixture('late-listen.mjs')], {env: {FIXTURE_LISTEN_DELAY_MS: '30000', FIXTURE_HOOK_MS: '0'}});
	await never.waitForLog('fixture attached', {timeout: 30_000});
	never.kill('SIGTERM');
	t.like(await never.exitWithin(15_000), {code: 0, signal: null}, never.text().slice(-3000));
	t.like(never.lines.find(line => line.msg === 'fixture server closed'), {error: null}, never.text().slice(-3000));
	t.falsy(never.lines.find(line => line.msg === 'fixture listening'));
	t.like(never.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', workersLost: 0});
});

test('a drain before the attached server listens, its shutdown registered only in the listen callback: the hooks wait for the listen, so that shutdown runs; exit 0', async t => {
	const late = start(t, ['-w', '1', '--reject-period', '300ms', '--grace-period', '15s', fixture('late-listen.mjs')], {env: {FIXTURE_LISTEN_DELAY_MS: '2500', FIXTURE_HOOK_MS: '0', FIXTURE_LISTENER: 'in-listen-callback'}});
	await late.waitForLog('fixture attached', {timeout: 30_000});
	late.kill('SIGTERM');
	t.like(await late.exitWithin(15_000), {code: 0, signal: null}, late.text().slice(-3000));
	const listened = late.lines.findIndex(line => line.msg === 'fixture listening');
	const closed = late.lines.findIndex(line => line.msg === 'fixture server closed');
	t.true(listened !== -1 && closed > listened, late.text().slice(-3000));
	t.like(late.lines[closed], {error: null});
	t.like(late.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', workersLost: 0, hooksFailed: 0});
});

test('a connection opened before the reject phase ends, its request sent after (or finished after): answered 503, not dropped; one that never sends it whole is closed cleanly, without holding the drain', async t => {
	const gracePeriodMs = 15_000;
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', `${gracePeriodMs}ms`], fixture('app.mjs'), {workers: 1});
	// Connected (the worker has them), no request yet, or part of one: to Node they are idle, and http.Server#close() destroyed them.
	const late = await RawConnection.open(app.port);
	const split = await RawConnection.open(app.port);
	split.socket.write('GET / HT');
	const silent = await RawConnection.open(app.port);
	const stuck = await RawConnection.open(app.port);
	stuck.socket.write('GET / HTTP/1.1\r\nHost: x\r\n');
	app.kill('SIGTERM');
	await app.waitForLog('stopped listening; waiting for requests in flight');
	split.socket.write('TP/1.1\r\nHost: x\r\n\r\n');
	for (const answer of [await late.request('/'), await split.readResponse()]) {
		t.is(answer.status, 503, app.text().slice(-3000));
		t.is(answer.headers['connection'], 'close');
		t.is(answer.headers['retry-after'], '1');
	}

	t.is(await late.closedByServer(), 'fin');
	t.is(await split.closedByServer(), 'fin');
	// Waited for (FIRST_REQUEST_WAIT_MS), then closed as the drain's end closes a connection: a FIN.
	t.is(await silent.closedByServer(), 'fin');
	t.is(await stuck.closedByServer(), 'fin');
	t.like(await app.exitWithin(gracePeriodMs), {code: 0}, app.text().slice(-3000));
	const summary = app.lines.find(line => line.msg === 'drain finished')!;
	t.like(summary, {outcome: 'clean', arrivals: 2});
	t.true(Number(summary['durationMs']) < gracePeriodMs / 2, `not held to the deadline: ${String(summary['durationMs'])} ms`);
});
