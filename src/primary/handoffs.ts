/**
 * Connections node:cluster's round-robin strands in the primary: found, and
 * handed to `onStranded` (stranded.ts answers them).
 *
 * In round-robin mode (node:cluster's default, but on Windows) the primary
 * accepts each connection and hands it to a worker over IPC ('newconn'); the
 * worker answers whether it took it. A worker whose server has just closed
 * refuses it, and node:cluster queues it for another worker on that port. If
 * that worker was the last one on the port, node:cluster has already closed
 * the port and dropped its queue: the connection waits there, its request
 * unread, until the primary exits (nodejs/node#21746, open since Node 10). A
 * drain's reject phase ends just so: every worker closes its servers while a
 * load balancer may still be sending. A connection handed to a worker that
 * exits before it answers is held the same way, by the primary's copy of it.
 *
 * node:cluster has no way to look at its queues, so this follows its messages
 * from outside: what it sends each worker (through the worker's
 * `process.send`), and the answers and closes that come back
 * ('internalMessage', heard just before node:cluster's own listener; a refusal
 * is looked at once node:cluster has acted on it). From those it knows which workers listen on each port (node:cluster's
 * `key`) exactly as node:cluster counts them. A refused connection whose port
 * has no worker left, or one handed to a worker that exited without
 * answering, is stranded. The messages are node:cluster's own (`cmd:
 * 'NODE_CLUSTER'`), unchanged in shape since Node 0.12; anything else passes by.
 *
 * The last worker to leave a port also takes node:cluster's queue with it:
 * the connections accepted and not yet handed to a worker (26 of them, in a
 * drain under a client opening connections as fast as it can), which
 * node:cluster closes unread, a reset to each client. Just before node:cluster
 * hears that its last worker leaves (a listener put ahead of its own),
 * `takeQueued` takes them out of that queue, and they are stranded too.
 */
import type {Worker} from 'node:cluster';

/** A connection as node:cluster holds it in the primary: a libuv TCP or pipe handle, not a net.Socket. */
export type RawHandle = object;

interface ClusterMessage {
	readonly cmd?: unknown;
	readonly act?: unknown;
	readonly key?: unknown;
	readonly seq?: unknown;
	readonly ack?: unknown;
	readonly errno?: unknown;
	readonly accepted?: unknown;
	readonly sockname?: {readonly address?: unknown; readonly family?: unknown; readonly port?: unknown};
}

/** A port node:cluster hands out: the workers it hands its connections to, and the address it is bound to. */
interface Port {
	readonly workers: Set<number>;
	readonly bound: {readonly address?: unknown; readonly family?: unknown; readonly port?: unknown} | undefined;
}

interface Handoff {
	readonly handle: RawHandle;
	readonly key: string;
	readonly worker: number;
}

type Send = (message: unknown, handle?: unknown, ...rest: unknown[]) => boolean;

const isClusterMessage = (message: unknown): message is ClusterMessage => typeof message === 'object' && message !== null && (message as ClusterMessage).cmd === 'NODE_CLUSTER';

export class HandoffWatch {
	/** Per port (node:cluster's key, which names the address asked for), the workers node:cluster hands its connections to. */
	private readonly ports = new Map<string, Port>();
	/** Connections sent to a worker and not answered yet, by the message's `seq`: one per worker at most. */
	private readonly unanswered = new Map<number, Handoff>();
	/** Connections given to `onStranded` already. */
	private readonly stranded = new WeakSet<RawHandle>();

	constructor(private readonly onStranded: (handle: RawHandle) => void) {}

	/** Call right after `cluster.fork()`, before the worker can send anything. */
	watch(worker: Worker): void {
		const child = worker.process;
		const {id} = worker;
		const send = child.send as Send;
		// Per connection: a property check and a Map entry here, and its answer's below.
		const watched: Send = (message, handle, ...rest) => {
			if (isClusterMessage(message)) {
				this.sent(id, message, handle);
			}

			return Reflect.apply(send, child, [message, handle, ...rest]) as boolean;
		};
		child.send = watched as typeof child.send;
		// Ahead of node:cluster's listener: a worker's last port's queue is
		// taken before node:cluster closes it.
		child.prependListener('internalMessage', (message: unknown) => {
			if (isClusterMessage(message)) {
				this.received(id, message);
			}
		});
		// node:cluster takes the worker off every port on its 'disconnect', or
		// on its 'exit' if the channel has closed by then (an 'exit' first, the
		// worker stays until its 'disconnect'). Ahead of node:cluster's own
		// listener: its last ports' queues are taken before node:cluster closes
		// them, and what it was handed and never answered is stranded before
		// the fleet hears that it is gone (a drain counts it and waits for its answer).
		const leave = (): void => {
			if (child.connected) {
				return;
			}

			this.leave(id);
			if (child.exitCode !== null || child.signalCode !== null) {
				this.exited(id);
			}
		};

		child.prependListener('disconnect', leave);
		child.prependListener('exit', leave);
	}

	/**
	 * node:cluster is about to take the worker off every port (the primary's
	 * `worker.disconnect()`, the worker's 'disconnect' or 'exit'): the queues of
	 * the ports it was the last on are taken first.
	 */
	leave(workerId: number): void {
		for (const key of [...this.ports.keys()]) {
			this.leaving(workerId, key);
			this.left(workerId, key);
		}
	}

	/** The worker is about to leave the port; if it is the last, node:cluster will close the port's queue: take it first. */
	private leaving(workerId: number, key: string): void {
		const port = this.ports.get(key);
		if (port?.workers.size === 1 && port.workers.has(workerId)) {
			const others = [...this.ports.values()].filter(each => each !== port).map(each => each.bound);
			for (const handle of takeQueued(port.bound, others)) {
				this.strand(handle);
			}
		}
	}

	/** Once per connection: a refused one node:cluster queued again may be taken with the queue before its refusal is looked at. */
	private strand(handle: RawHandle): void {
		if (this.stranded.has(handle)) {
			return;
		}

		this.stranded.add(handle);
		unlink(handle);
		this.onStranded(handle);
	}

	private left(workerId: number, key: string): void {
		const port = this.ports.get(key);
		port?.workers.delete(workerId);
		if (port?.workers.size === 0) {
			this.ports.delete(key);
		}
	}

	private sent(workerId: number, message: ClusterMessage, handle: unknown): void {
		const {act, key, seq, ack} = message;
		if (typeof key !== 'string') {
			return;
		}

		if (act === 'newconn' && typeof seq === 'number' && typeof handle === 'object' && handle !== null) {
			this.unanswered.set(seq, {handle, key, worker: workerId});
		} else if (act === undefined && ack !== undefined && !message.errno) {
			// The answer to the worker's `listen()` (its queryServer): node:cluster hands it this port's connections from now on.
			let port = this.ports.get(key);
			if (port === undefined) {
				port = {workers: new Set(), bound: message.sockname};
				this.ports.set(key, port);
			}

			port.workers.add(workerId);
		}
	}

	/** A message from the worker, heard before node:cluster acts on it. */
	private received(workerId: number, message: ClusterMessage): void {
		const {act, key, ack} = message;
		if (act === 'close' && typeof key === 'string') {
			this.leaving(workerId, key);
			this.left(workerId, key);
			return;
		}

		if (typeof ack !== 'number') {
			return;
		}

		const handoff = this.unanswered.get(ack);
		if (handoff === undefined) {
			return;
		}

		this.unanswered.delete(ack);
		if (message.accepted !== true) {
			// node:cluster queues it again, and sends it on if a worker is free: look once it has.
			queueMicrotask(() => {
				this.refused(handoff);
			});
		}
	}

	/**
	 * A refusal node:cluster has acted on. Not sent on to another worker, and no
	 * worker left on its port: queued where nothing will take it.
	 */
	private refused(handoff: Handoff): void {
		const {handle} = handoff;
		if (this.ports.has(handoff.key) || [...this.unanswered.values()].some(each => each.handle === handle)) {
			return;
		}

		this.strand(handle);
	}

	/** A worker exited and its channel closed: what was handed to it and not answered never will be, and the primary's copy holds it open. */
	private exited(workerId: number): void {
		for (const [seq, handoff] of this.unanswered) {
			if (handoff.worker === workerId) {
				this.unanswered.delete(seq);
				this.strand(handoff.handle);
			}
		}
	}
}

/**
 * node:cluster's queue on a port, as it stands (`bound`: the address the port
 * is bound to, from node:cluster's answer to `listen()`; `others`: those of the
 * ports still served, whose queues are left alone). A queue is a ring of
 * internal/linkedlist (`_idleNext`/`_idlePrev` on each handle), reached
 * through its handles: `process._getActiveHandles()` lists the primary's, and a
 * handle in a queue is the only kind linked so. Each handle taken is unlinked
 * and the ring left empty, so node:cluster closes nothing of it. Unix socket
 * ports, and a Node whose internals differ, give none: node:cluster then
 * closes them as before.
 */
export function takeQueued(bound: Port['bound'], others: ReadonlyArray<Port['bound']> = []): RawHandle[] {
	const active = (process as unknown as {_getActiveHandles?: () => unknown[]})._getActiveHandles;
	if (typeof bound?.port !== 'number' || typeof active !== 'function') {
		return [];
	}

	const taken: RawHandle[] = [];
	for (const handle of active.call(process)) {
		// Taken already with an earlier handle's ring, or in none.
		if (!isQueued(handle)) {
			continue;
		}

		const local: Address = {};
		if (handle.getsockname(local) !== 0 || !accepts(bound, local) || others.some(other => other !== undefined && other.address === local.address && other.port === local.port)) {
			continue;
		}

		// Round the ring to its head (the queue itself, not a handle), then take every handle from it.
		let head: Linked = handle;
		while (isQueued(head)) {
			head = head._idleNext!;
		}

		for (let node = head._idleNext; node !== undefined && node !== null && node !== head; node = head._idleNext) {
			unlink(node);
			taken.push(node);
		}
	}

	return taken;
}

interface Address {
	address?: unknown;
	family?: unknown;
	port?: unknown;
}

/** Whether a port bound to `bound` accepts a connection to `local`: the same port, and the address, or a wildcard of its family (`::` takes IPv4 too). */
function accepts(bound: NonNullable<Port['bound']>, local: Address): boolean {
	if (local.port !== bound.port) {
		return false;
	}

	if (bound.address === '0.0.0.0') {
		return local.family === 'IPv4';
	}

	return bound.address === '::' || local.address === bound.address;
}

interface Linked {
	_idleNext?: Linked | null;
	_idlePrev?: Linked | null;
}

type QueuedHandle = Linked & {getsockname(out: object): number};

const isQueued = (value: unknown): value is QueuedHandle => typeof value === 'object' && value !== null && typeof (value as QueuedHandle).getsockname === 'function' && typeof (value as Linked)._idleNext === 'object' && (value as Linked)._idleNext !== null;

/** Takes a handle out of the queue it is in (a refused one, queued again where nothing will take it), as internal/linkedlist's `remove` does. */
function unlink(handle: Linked): void {
	const {_idleNext: next, _idlePrev: previous} = handle;
	if (next) {
		next._idlePrev = previous;
	}

	if (previous) {
		previous._idleNext = next;
	}

	handle._idleNext = null;
	handle._idlePrev = null;
}
