// The ledger's lazy mode (HTTP/2 streams): no 'close' listener per entry while
// serving, the closed ones swept out, every entry still open tracked from the
// drain on, and the drain's counts as exact as the tracked mode's.
import test from 'ava';
import {EventEmitter, once} from 'node:events';
import http2, {type ServerHttp2Stream} from 'node:http2';
import type {AddressInfo} from 'node:net';
import {Mode} from '../../src/worker/filter.js';
import {Http2Filter} from '../../src/worker/http2-filter.js';
import {Ledger} from '../../src/worker/ledger.js';
import {waitUntil} from '../../testkit/proc.js';

class Entry extends EventEmitter {
	closed = false;
	completed = true;
	close(completed = true): void {
		this.closed = true;
		this.completed = completed;
		this.emit('close');
	}
}

function lazyLedger(): {ledger: Ledger<Entry>; idle: () => number} {
	let idleCalls = 0;
	const ledger = new Ledger<Entry>(() => {
		idleCalls++;
	}, entry => entry.completed, entry => entry.closed);
	return {ledger, idle: () => idleCalls};
}

test('lazy: no close listener while serving; the closed entries are swept, inflight exact whenever it is read', t => {
	const {ledger} = lazyLedger();
	const entries = Array.from({length: 1000}, () => new Entry());
	for (const [index, entry] of entries.entries()) {
		ledger.add(entry);
		// All but every 100th closes at once, as most requests do.
		if (index % 100 !== 0) {
			entry.close();
		}
	}

	t.true(entries.every(entry => entry.listenerCount('close') === 0), 'no listener added per entry while serving');
	t.is(ledger.requests, 1000);
	t.is(ledger.inflight, 10);
	t.is(ledger.served, 0, 'nothing counts as served before the drain');
});

test('lazy: at the drain, each entry still open is tracked; its close counts as served or aborted, the last calls onIdle', t => {
	const {ledger, idle} = lazyLedger();
	const open = [new Entry(), new Entry(), new Entry()];
	const done = new Entry();
	for (const entry of [open[0]!, done, open[1]!, open[2]!]) {
		ledger.add(entry);
	}

	done.close();
	ledger.draining = true;
	t.deepEqual(open.map(entry => entry.listenerCount('close')), [1, 1, 1]);
	t.is(done.listenerCount('close'), 0);
	t.is(ledger.inflight, 3);
	t.true(ledger.has(open[1]!));
	t.false(ledger.has(done));
	open[0]!.close();
	open[1]!.close(false);
	t.is(idle(), 0);
	// One added during the drain is tracked at once.
	const late = new Entry();
	ledger.add(late);
	t.is(late.listenerCount('close'), 1);
	open[2]!.close();
	late.close();
	t.like(ledger, {served: 3, aborted: 1, inflight: 0});
	t.is(idle(), 1);
});

test('lazy: asking for the entries (a drain-time pass) tracks them too, once', t => {
	const {ledger} = lazyLedger();
	const entry = new Entry();
	ledger.add(entry);
	t.deepEqual(ledger.entries, [entry]);
	t.is(entry.listenerCount('close'), 1);
	ledger.draining = true;
	ledger.draining = false;
	ledger.draining = true;
	t.is(entry.listenerCount('close'), 1, 'never a second listener');
	ledger.add(new Entry());
	t.is(ledger.inflight, 2);
});

test('without isClosed (HTTP/1.1 responses) every entry is tracked from its add', t => {
	const ledger = new Ledger<Entry>(() => {}, () => true);
	const entry = new Entry();
	ledger.add(entry);
	t.is(entry.listenerCount('close'), 1);
	entry.close();
	t.is(ledger.inflight, 0);
});

test('lazy, real HTTP/2: a stream the app closed with megabytes still queued for a slow client is still in flight at the drain, and served once they are read', async t => {
	const server = http2.createServer();
	const filter = new Http2Filter(server, {retryAfterSeconds: 1, readinessPath: '/readyz', livenessPath: '/livez', onIdle() {}});
	server.on('stream', (stream: ServerHttp2Stream) => {
		stream.respond({':status': 200});
		stream.end(Buffer.alloc(5_000_000));
		// HTTP/2 says closed from here on; the data is still queued.
		stream.close();
	});
	server.listen(0, '127.0.0.1');
	await once(server, 'listening');
	const client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
	t.teardown(() => {
		client.destroy();
		server.close();
	});
	const request = client.request({':path': '/'});
	request.pause();
	await once(request, 'response');
	t.is(filter.inflight, 1, 'a sweep while serving keeps it');
	filter.setMode(Mode.REJECT);
	t.is(filter.inflight, 1, 'the slow response is in flight');
	request.resume();
	await once(request, 'end');
	await waitUntil(() => filter.served === 1, {timeout: 5000, what: 'the slow response served'});
	t.is(filter.inflight, 0);
	t.is(filter.aborted, 0);
});
