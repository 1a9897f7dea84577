// The drain's graceful close of one connection (closeLingering), on real sockets.
import test from 'ava';
import {once} from 'node:events';
import net, {type AddressInfo} from 'node:net';
import {pEvent} from 'p-event';
import {closeLingering} from '../../src/worker/http1-connections.js';

/** A server socket and its client, connected. */
async function connectedPair(t: {teardown(fn: () => void): void}): Promise<{server: net.Socket; client: net.Socket}> {
	const listener = net.createServer();
	listener.listen(0, '127.0.0.1');
	await once(listener, 'listening');
	const accepted = pEvent<string, net.Socket>(listener, 'connection', {timeout: 5000});
	// Half-open allowed: the client ends its side only when the test says so, not at the server's FIN.
	const client = net.connect({port: (listener.address() as AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true});
	const server = await accepted;
	t.teardown(() => {
		client.destroy();
		server.destroy();
		listener.close();
	});
	return {server, client};
}

test('a lingering connection closes once the client ends its side; a second end() without arguments is a no-op, one with a callback still reaches the socket', async t => {
	const {server, client} = await connectedPair(t);
	let closedCalls = 0;
	closeLingering(server, 5000, () => {
		closedCalls++;
	});
	// The server's FIN reaches the client.
	client.resume();
	await pEvent(client, 'end', {timeout: 5000});

	// What Node's HTTP server does at the client's FIN (socketOnEnd): a bare end(), here returning at once.
	t.is(server.end(), server);
	// A caller that wants to know gets Node's own answer, as before.
	const callback = new Promise<unknown>(resolve => {
		server.end((error?: Error | null) => {
			resolve(error);
		});
	});
	t.is((await callback as NodeJS.ErrnoException | undefined)?.code, 'ERR_STREAM_ALREADY_FINISHED');

	const serverClosed = once(server, 'close');
	client.end();
	await serverClosed;
	t.is(closedCalls, 1);
	t.false(server.errored !== null && server.errored !== undefined, String(server.errored));
});

test('a lingering connection whose client never ends its side is closed after the linger, not before', async t => {
	const {server, client} = await connectedPair(t);
	const started = performance.now();
	let closed = false;
	closeLingering(server, 300, () => {
		closed = true;
	});
	client.resume();
	await pEvent(client, 'end', {timeout: 5000});
	t.false(closed, 'the client has not ended its side: the connection waits');
	await pEvent(server, 'close', {timeout: 5000});
	t.true(closed);
	t.true(performance.now() - started >= 250, 'closed at the linger\'s end');
});
