// One process's servers and its drain (attach.ts): the bootstrap's `take` as a
// server listens and the app's attach() meet on one filter per server; options
// given later apply to it; a server the app leaves out is never taken, or let go.
import {once} from 'node:events';
import http from 'node:http';
import net, {type AddressInfo} from 'node:net';
import test from 'ava';
import {DEFAULT_WORKER_SETTINGS} from '../../src/settings.js';
import {Attachments} from '../../src/worker/attach.js';
import {isExcluded, markExcluded} from '../../src/worker/filter.js';
import {exclude} from '../../src/worker/index.js';
import {ProcessDrain} from '../../src/worker/drain.js';
import {captureLogger, FakeClock} from '../helpers/fakes.js';
import {client} from '../helpers/http.js';
import {url} from '../../testkit/net.js';

function rig() {
	const {logger} = captureLogger('worker');
	const drain = new ProcessDrain({...DEFAULT_WORKER_SETTINGS, keepAliveTimeoutMs: 65_000}, logger, new FakeClock());
	const uncovered: string[] = [];
	const attachments = new Attachments(drain, {checkTimeoutMs: 1000, uncovers: address => uncovered.push(address)});
	return {drain, attachments, uncovered};
}

async function listening(t: import('ava').ExecutionContext, server: net.Server): Promise<number> {
	server.listen(0, '127.0.0.1');
	await once(server, 'listening');
	t.teardown(() => {
		(server as http.Server).closeAllConnections?.();
		server.close();
	});
	return (server.address() as AddressInfo).port;
}

test('take(), then attach() with readiness checks: one filter, the checks answer its probe', async t => {
	const {drain, attachments} = rig();
	const server = http.createServer((_request, response) => response.end('app'));
	t.true(attachments.take(server));
	let ready = false;
	const handle = attachments.attach(server, {readinessChecks: {db: () => ready}});
	t.true(attachments.take(server), 'still the one filter');
	const port = await listening(t, server);
	t.like(await client(url(port, '/readyz')), {statusCode: 503, body: 'db: not ready\n'});
	ready = true;
	t.like(await client(url(port, '/readyz')), {statusCode: 200});
	t.like(await client(url(port, '/')), {statusCode: 200, body: 'app'});
	t.is(drain.requests, 1, 'counted once, not once per call');
	t.is(handle.phase, 'serving');
});

test('attach() twice, and before take(): one filter; the second call\'s checks replace the first\'s', async t => {
	const {drain, attachments} = rig();
	const server = http.createServer((_request, response) => response.end('app'));
	attachments.attach(server, {readinessChecks: {first: () => false}});
	attachments.attach(server, {readinessChecks: {second: () => false}});
	t.true(attachments.take(server));
	const port = await listening(t, server);
	t.like(await client(url(port, '/readyz')), {statusCode: 503, body: 'second: not ready\n'});
	await client(url(port, '/'));
	t.is(drain.requests, 1);
});

test('a server left out before it listens is not taken; attach() takes it back', t => {
	const {attachments} = rig();
	const server = http.createServer();
	markExcluded(server, true);
	t.false(attachments.take(server));
	t.false(attachments.has(server));
	attachments.attach(server);
	t.false(isExcluded(server), 'an explicit attach() wins');
	t.true(attachments.has(server));
});

test('exclude() of a taken, listening server: the filter comes off (no probes any more), the primary is told it no longer counts it', async t => {
	const {attachments, uncovered} = rig();
	const server = http.createServer((_request, response) => response.end('app'));
	attachments.take(server);
	const port = await listening(t, server);
	t.is((await client(url(port, '/readyz'))).body, 'ready\n');
	t.is(server.keepAliveTimeout, 65_000, '--keep-alive-timeout while drained');
	attachments.exclude(server);
	t.is((await client(url(port, '/readyz'))).body, 'app', 'the app\'s own route now');
	t.is(server.keepAliveTimeout, 5000, 'its own keep-alive timeout back');
	t.deepEqual(uncovered, [String(port)]);
	t.false(attachments.take(server), 'a later listen does not take it back');
});

test('detach() on the handle leaves the server out, as exclude() does', async t => {
	const {attachments} = rig();
	const server = http.createServer();
	attachments.attach(server).detach();
	t.true(isExcluded(server));
	t.false(attachments.has(server));
});

test('attach() refuses what it cannot drain, with what to do: a net.Server, an app function, a grpc-js Server, a registry that is not one', t => {
	const {attachments} = rig();
	t.throws(() => attachments.attach(net.createServer() as never), {instanceOf: TypeError, message: /got a net\.Server, which is not an HTTP server/});
	t.throws(() => attachments.attach((() => {}) as never), {instanceOf: TypeError, message: /pass the server that app\.listen\(\) returns/});
	const grpcLike = {bindAsync() {}, tryShutdown() {}};
	t.throws(() => attachments.attach(grpcLike as never), {instanceOf: TypeError, message: /grpc-js Server[^]*Remove the call/});
	t.throws(() => attachments.attach(http.createServer(), {metricsRegistry: {} as never}), {instanceOf: TypeError, message: /prom-client Registry/});
});

test('exclude() refuses what is not a server, naming what it got', t => {
	t.throws(() => {
		exclude((() => {}) as never);
	}, {instanceOf: TypeError, message: /exclude\(server\) takes a server[^]*pass the server that app\.listen\(\) returns/});
	t.throws(() => {
		exclude({} as never);
	}, {instanceOf: TypeError, message: /got an object \(Object\)/});
});
