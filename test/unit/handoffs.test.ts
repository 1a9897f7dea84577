// The primary's watch over node:cluster's round-robin hand-off (primary/handoffs.ts),
// on fake workers that speak node:cluster's messages: which connections it calls
// stranded, and which it leaves to node:cluster. The real thing, end to end, is
// e2e/stranded.test.ts.
import {EventEmitter} from 'node:events';
import type {Worker} from 'node:cluster';
import test from 'ava';
import {HandoffWatch, type RawHandle} from '../../src/primary/handoffs.js';

const KEY = '127.0.0.1:3000:4:-1:0';

/** A worker's process as node:cluster's primary sees it: `send`, 'internalMessage', 'exit', 'disconnect'. */
class FakeChild extends EventEmitter {
	connected = true;
	exitCode: number | null = null;
	signalCode: NodeJS.Signals | null = null;
	readonly sent: unknown[] = [];

	send(message: unknown, _handle?: unknown): boolean {
		this.sent.push(message);
		return true;
	}

	/** A message from the worker, as node:cluster hears it (its own listener first, as in a real primary). */
	answer(message: Record<string, unknown>): void {
		this.emit('internalMessage', {cmd: 'NODE_CLUSTER', ...message});
	}

	exit(): void {
		this.exitCode = 1;
		this.emit('exit', 1, null);
	}

	closeChannel(): void {
		this.connected = false;
		this.emit('disconnect');
	}
}

let seq = 100;

/** A refusal is looked at once node:cluster has acted on it: a microtask later. */
const acted = async () => new Promise<void>(resolve => {
	queueMicrotask(resolve);
});

function setup() {
	const stranded: RawHandle[] = [];
	const watch = new HandoffWatch(handle => {
		stranded.push(handle);
	});
	const fork = (id: number) => {
		const child = new FakeChild();
		// node:cluster's own listener, added in cluster.fork(): the watch puts its own ahead of it.
		child.on('internalMessage', () => {});
		watch.watch({id, process: child} as unknown as Worker);
		return child;
	};

	/** node:cluster's answer to the worker's listen(): it takes the port's connections from now on. */
	const listen = (child: FakeChild, sockname = {address: '127.0.0.1', family: 'IPv4', port: 3000}, key = KEY) => child.send({cmd: 'NODE_CLUSTER', errno: null, key, ack: seq++, sockname}, null);
	/** node:cluster hands the worker a connection; returns the message's seq. */
	const handOff = (child: FakeChild, handle: RawHandle) => {
		const at = seq++;
		child.send({cmd: 'NODE_CLUSTER', act: 'newconn', key: KEY, seq: at}, handle);
		return at;
	};

	return {watch, stranded, fork, listen, handOff};
}

test('a refused connection is stranded when no worker is left on its port, and only then', async t => {
	const {stranded, fork, listen, handOff} = setup();
	const [one, two] = [fork(1), fork(2)];
	listen(one);
	listen(two);
	const first = {};
	const second = {};
	const toOne = handOff(one, first);
	const toTwo = handOff(two, second);

	// One closes its server and refuses what was on its way: the other still listens, node:cluster queues it there.
	one.answer({act: 'close', key: KEY, seq: seq++});
	one.answer({ack: toOne, accepted: false});
	await acted();
	t.deepEqual(stranded, []);

	// The last one closes and refuses: node:cluster has closed the port and dropped its queue.
	two.answer({act: 'close', key: KEY, seq: seq++});
	two.answer({ack: toTwo, accepted: false});
	await acted();
	t.is(stranded.length, 1);
	t.is(stranded[0], second);
});

test('a refused connection node:cluster sends on at once is not stranded; an accepted one never is', async t => {
	const {stranded, fork, listen, handOff} = setup();
	const one = fork(1);
	listen(one);
	const handle = {};
	const first = handOff(one, handle);
	one.answer({act: 'close', key: KEY, seq: seq++});
	// Sent on to another worker (node:cluster's own listener does so as it hears the refusal, before ours hears it).
	const two = fork(2);
	listen(two);
	const again = handOff(two, handle);
	one.answer({ack: first, accepted: false});
	await acted();
	t.deepEqual(stranded, []);

	two.answer({ack: again, accepted: true});
	two.answer({act: 'close', key: KEY, seq: seq++});
	await acted();
	t.deepEqual(stranded, []);
});

test('a connection its worker never answered is stranded once the worker has exited and its channel closed, whichever came first', t => {
	for (const order of [['exit', 'disconnect'], ['disconnect', 'exit']] as const) {
		const {stranded, fork, listen, handOff} = setup();
		const one = fork(1);
		listen(one);
		const handle = {};
		handOff(one, handle);
		if (order[0] === 'exit') {
			one.exit();
			t.deepEqual(stranded, [], 'an answer may still come until the channel closes');
			one.closeChannel();
		} else {
			one.closeChannel();
			t.deepEqual(stranded, [], 'a worker still running may have taken it');
			one.exit();
		}

		t.deepEqual(stranded, [handle], order.join(' then '));
	}
});

test('an answer that comes after the exit, before the channel closes, is heard', t => {
	const {stranded, fork, listen, handOff} = setup();
	const one = fork(1);
	listen(one);
	const at = handOff(one, {});
	one.exit();
	one.answer({ack: at, accepted: true});
	one.closeChannel();
	t.deepEqual(stranded, []);
});

test('messages that are not node:cluster\'s pass through send unchanged', t => {
	const {fork} = setup();
	const one = fork(1);
	const message = {type: 'drain', rejectPeriodMs: 100};
	t.true(one.send(message));
	t.is(one.sent.at(-1), message);
});

/** A connection as node:cluster queues it: a handle with its local address, linked into a ring whose head is the queue. */
function queue(...locals: Array<{address: string; family: string; port: number}>) {
	type Node = {_idleNext: Node | null; _idlePrev: Node | null; getsockname?: (out: object) => number};
	const head: Node = {_idleNext: null, _idlePrev: null};
	head._idleNext = head;
	head._idlePrev = head;
	const handles = locals.map(local => {
		const handle: Node = {
			_idleNext: head._idleNext,
			_idlePrev: head,
			getsockname(out: object) {
				Object.assign(out, local);
				return 0;
			},
		};
		head._idleNext!._idlePrev = handle;
		head._idleNext = handle;
		return handle;
	});
	return {head, handles, empty: () => head._idleNext === head && head._idlePrev === head};
}

/** Runs `body` with `process._getActiveHandles()` listing `handles`, as the primary's would. */
function withActive(handles: readonly object[], body: () => void): void {
	const real = (process as unknown as {_getActiveHandles: () => unknown[]})._getActiveHandles;
	(process as unknown as {_getActiveHandles: () => unknown[]})._getActiveHandles = () => [...handles];
	try {
		body();
	} finally {
		(process as unknown as {_getActiveHandles: () => unknown[]})._getActiveHandles = real;
	}
}

test('the last worker leaving a port: node:cluster\'s queue on it is taken whole and left empty; a queue on another address of the same port number is not', t => {
	const {stranded, fork, listen} = setup();
	const one = fork(1);
	// 0.0.0.0:3000, and [::1]:3000 too (the app's two servers): the wildcard's queue is IPv4's alone.
	listen(one, {address: '0.0.0.0', family: 'IPv4', port: 3000});
	listen(one, {address: '::1', family: 'IPv6', port: 3000}, '::1:3000:6:-1:1');
	const mine = queue({address: '127.0.0.1', family: 'IPv4', port: 3000}, {address: '10.0.0.5', family: 'IPv4', port: 3000});
	const otherAddress = queue({address: '::1', family: 'IPv6', port: 3000});
	const otherPort = queue({address: '127.0.0.1', family: 'IPv4', port: 3001});
	withActive([...otherAddress.handles, ...mine.handles, ...otherPort.handles], () => {
		one.answer({act: 'close', key: KEY, seq: seq++});
	});
	t.is(stranded.length, 2);
	t.true(mine.handles.every(handle => stranded.includes(handle)));
	t.true(mine.empty(), 'node:cluster closes nothing of it');
	t.false(otherAddress.empty());
	t.false(otherPort.empty());
});

test('a refused connection node:cluster queued again and that was taken with the queue is answered once', async t => {
	const {stranded, fork, listen, handOff} = setup();
	const one = fork(1);
	listen(one);
	const {handles: [queued], empty} = queue({address: '127.0.0.1', family: 'IPv4', port: 3000});
	const at = handOff(one, queued!);
	// The refusal and the close come in one read: node:cluster has queued the refused connection again by the close.
	one.answer({ack: at, accepted: false});
	withActive([queued!], () => {
		one.answer({act: 'close', key: KEY, seq: seq++});
	});
	await acted();
	t.deepEqual(stranded, [queued]);
	t.true(empty());
});

test('a worker that exits while still connected stays on its ports until its channel closes, as in node:cluster', t => {
	const {stranded, fork, listen} = setup();
	const one = fork(1);
	listen(one);
	const {handles, empty} = queue({address: '127.0.0.1', family: 'IPv4', port: 3000});
	withActive(handles, () => {
		one.exit();
	});
	t.deepEqual(stranded, [], 'node:cluster still has it on the port');
	withActive(handles, () => {
		one.closeChannel();
	});
	t.deepEqual(stranded, handles);
	t.true(empty());
});
