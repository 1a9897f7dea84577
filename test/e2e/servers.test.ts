// Apps with more than one server, none of them passed to attach(): every HTTP
// server is drained as it listens (an admin or metrics port too); one the
// drain does not take (left out with exclude(), or not HTTP) is named at
// start, and the drain's summary says it went uncounted.
import {performance} from 'node:perf_hooks';
import test from 'ava';
import {url, freePort} from '../../testkit/net.js';
import {fixture, start, type LogLine} from '../helpers/cluster.js';
import {client, rawExchange} from '../helpers/http.js';

const WARNING = 'a server graceful-cluster does not drain listens here (not HTTP, left out with exclude(), or --auto-attach off without attach()): nothing counts its requests, and those in flight when the worker exits are cut';
const drainFinished = (lines: readonly LogLine[]): LogLine | undefined => lines.find(line => line.role === 'primary' && line.msg === 'drain finished');

test('an admin port with no code in the app: both servers drained; a request in flight on each finishes, /readyz and new requests get the drain 503 on each, all counted', async t => {
	const [port, adminPort] = [await freePort(), await freePort()];
	const app = start(t, ['-w', '2', '--log-level', 'debug', '--reject-period', '3s', '--grace-period', '15s', fixture('two-servers.mjs')], {env: {PORT: String(port), ADMIN_PORT: String(adminPort)}});
	await app.waitForLog('worker listening', {count: 4});
	await app.waitForLog('every address of the worker is drained', {count: 2});
	const slow = [client(url(port, '/slow?ms=4000')), client(url(adminPort, '/slow?ms=4000'))];
	await app.waitForLog('fixture request started', {count: 2});
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});
	for (const each of [port, adminPort]) {
		t.like(await client(url(each, '/')), {statusCode: 503, headers: {connection: 'close', 'retry-after': '1'}}, `a new request on ${each}`);
		t.is((await client(url(each, '/readyz'))).statusCode, 503, `/readyz on ${each}`);
	}

	t.deepEqual((await Promise.all(slow)).map(response => response.body), ['app slow', 'admin slow'], 'past the reject phase\'s end');
	t.is((await app.exited).code, 0, app.text());
	t.falsy(app.lines.find(line => line.msg === WARNING));
	t.like(drainFinished(app.lines), {outcome: 'clean', exitCode: 0, served: 2, rejected: 2, responsesCut: 0, uncounted: []});
});

for (const when of ['before', 'after'] as const) {
	test(`an admin server left out with exclude() ${when} its listen(): served as without graceful-cluster through the drain, named at start; the drain is "uncounted", exit 0`, async t => {
		const adminPort = await freePort();
		const app = start(t, ['-w', '2', '--reject-period', '2s', fixture('two-servers.mjs')], {env: {ADMIN_PORT: String(adminPort), ADMIN_EXCLUDE: when}});
		const warning = await app.waitForLog(WARNING);
		t.is(warning['address'], `*:${adminPort}`);
		t.is(warning['level'], 'warn');
		const addresses = app.lines.filter(line => line.msg === 'worker listening').map(line => String(line['address']));
		t.is(addresses.filter(address => address === `*:${adminPort}`).length, 2, 'every address is logged');
		app.kill('SIGTERM');
		await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});
		t.like(await client(url(adminPort, '/')), {statusCode: 200, body: 'admin'}, 'no filter on it');
		t.like(await client(url(adminPort, '/readyz')), {statusCode: 200, body: 'admin'}, 'no probes either: the app\'s own route');
		t.is((await app.exited).code, 0, app.text());
		t.is(app.lines.filter(line => line.msg === WARNING).length, 1, 'once per address, not per worker');
		const summary = drainFinished(app.lines);
		t.like(summary, {outcome: 'uncounted', exitCode: 0, responsesCut: null, uncounted: [`*:${adminPort}`]});
		t.is(typeof summary?.['served'], 'number', 'the app server\'s requests are still counted');
	});
}

test('a raw net server beside the HTTP one: it serves untouched, named at start; the HTTP server drains as ever; the summary says uncounted, exit 0', async t => {
	const [port, rawPort] = [await freePort(), await freePort()];
	const app = start(t, ['-w', '1', '--reject-period', '2s', fixture('two-servers.mjs')], {env: {PORT: String(port), RAW_PORT: String(rawPort)}});
	t.is((await app.waitForLog(WARNING))['address'], `*:${rawPort}`);
	t.is((await rawExchange(rawPort, '', {until: received => received.includes('raw')})).received, 'raw\n');
	const slow = client(url(port, '/slow?ms=3000'));
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests');
	t.like(await client(url(port, '/')), {statusCode: 503, headers: {connection: 'close'}});
	t.is((await client(url(port, '/readyz'))).statusCode, 503);
	t.is((await rawExchange(rawPort, '', {until: received => received.includes('raw')})).received, 'raw\n', 'the raw server is the app\'s: it still serves');
	t.is((await slow).body, 'app slow');
	t.is((await app.exited).code, 0, app.text());
	t.like(drainFinished(app.lines), {outcome: 'uncounted', exitCode: 0, served: 1, rejected: 1, responsesCut: null, uncounted: [`*:${rawPort}`]});
});

// The servers the drain does not take stop listening when the drained ones do,
// as node:cluster's disconnect would close them: the app's own shutdown, which
// closes only its main server, then leaves nothing listening, and the worker
// ends by itself instead of waiting for the deadline.
test('a raw net server beside the HTTP one, the app closing only the HTTP one: the raw one stops listening at the reject phase\'s end (or at once, retired by a reload), and the worker leaves by itself', async t => {
	const rawPort = await freePort();
	const app = start(t, ['-w', '1', '--reject-period', '500ms', '--grace-period', '20s', fixture('two-servers.mjs')], {env: {RAW_PORT: String(rawPort), APP_SHUTDOWN: '1'}});
	await app.waitForLog('worker listening', {count: 2});
	const [first] = app.lines.filter(line => line.msg === 'worker started').map(line => line['workerPid']);
	app.kill('SIGHUP');
	await app.waitForLog(line => line.msg === 'worker exited' && line['workerPid'] === first, {timeout: 10_000});
	t.falsy(app.lines.find(line => line.msg === 'retiring worker still running at the deadline; killing it'));
	t.is((await rawExchange(rawPort, '', {until: received => received.includes('raw')})).received, 'raw\n', 'the new worker serves the raw port');
	const signalledAt = app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.true(performance.now() - signalledAt < 8000, 'long before the 20 s deadline');
	t.is(app.lines.filter(line => line.msg === 'fixture cleanup').length, 2, 'each worker\'s shutdown ran to its end');
	t.like(drainFinished(app.lines), {outcome: 'uncounted', exitCode: 0, hooksFailed: 0, workersLost: 0, uncounted: [`*:${rawPort}`]});
});

// listen({exclusive: true}) binds the worker's own port without node:cluster,
// which then tells the primary nothing: the worker does, and the drain takes
// the server all the same.
test('an admin server that binds its port without node:cluster (exclusive: true): logged as listening, drained like the other; exit 0, clean', async t => {
	const [port, adminPort] = [await freePort(), await freePort()];
	const app = start(t, ['-w', '1', '--reject-period', '3s', '--grace-period', '15s', fixture('two-servers.mjs')], {env: {PORT: String(port), ADMIN_PORT: String(adminPort), ADMIN_EXCLUSIVE: '1'}});
	await app.waitForLog('worker listening', {count: 2});
	t.truthy(app.lines.find(line => line.msg === 'worker listening' && String(line['address']).endsWith(`:${adminPort}`)));
	const slow = client(url(adminPort, '/slow?ms=4000'));
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests');
	t.like(await client(url(adminPort, '/')), {statusCode: 503, headers: {connection: 'close'}});
	t.is((await slow).body, 'admin slow', 'past the reject phase\'s end');
	t.is((await app.exited).code, 0, app.text());
	t.falsy(app.lines.find(line => line.msg === WARNING));
	t.like(drainFinished(app.lines), {outcome: 'clean', exitCode: 0, served: 1, rejected: 1, responsesCut: 0, uncounted: []});
});
