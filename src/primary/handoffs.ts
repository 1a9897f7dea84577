/**
 * Connections node:cluster's round-robin strands in the primary, found and
 * handed to `onStranded` (stranded.ts answers them).
 *
 * In round-robin mode the primary accepts each connection and hands it to a
 * worker over IPC ('newconn'). A worker whose server has just closed refuses
 * it, and node:cluster queues it for another worker on that port; if none is
 * left, it waits there unread until the primary exits (nodejs/node#21746). A
 * drain's reject phase ends just so. A connection handed to a worker that
 * exits before it answers is held the same way, and the last worker to leave
 * a port takes node:cluster's queue with it: connections accepted and not yet
 * handed out, which node:cluster closes unread, a reset to each client.
 *
 * node:cluster has no way to look at its queues, so this follows its messages
 * (`cmd: 'NODE_CLUSTER'`, unchanged in shape since Node 0.12) from outside,
 * just ahead of its own listeners, and knows which workers listen on each
 * port exactly as node:cluster counts them.
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
	/** By node:cluster's key, which names the address asked for. */
	private readonly ports = new Map<string, Port>();
	/** Connections sent to a worker and not answered yet, by the message's `seq`: one per worker at most. */
	private readonly unanswered = new Map<number, Handoff>();
	private readonly stranded = new WeakSet<RawHandle>();

	constructor(private readonly onStranded: (handle: RawHandle) => void) {}

	/** Call right after `cluster.fork()`, before the worker can send anything. */
	watch(worker: Worker): void {
		const child = worker.process;
		const {id} = worker;
		const send = child.send as Send;
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
		// on its 'exit' if the channel has closed by then. Ahead of its listener,
		// so that what the worker was handed and never answered is stranded
		// before the fleet hears that it is gone.
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

	/** Before node:cluster takes the worker off every port: the queues of the ports it was the last on are taken first. */
	leave(workerId: number): void {
		for (const key of [...this.ports.keys()]) {
			this.leaving(workerId, key);
			this.left(workerId, key);
		}
	}

	/** If the worker is the last on the port, node:cluster will close the port's queue: take it first. */
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

	/** Not sent on to another worker, and no worker left on its port: queued where nothing will take it. */
	private refused(handoff: Handoff): void {
		const {handle} = handoff;
		if (this.ports.has(handoff.key) || [...this.unanswered.values()].some(each => each.handle === handle)) {
			return;
		}

		this.strand(handle);
	}

	/** What was handed to an exited worker and not answered never will be, and the primary's copy holds it open. */
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
 * node:cluster's queue on the port bound to `bound` (`others`: the ports still
 * served, left alone). A queue is a ring of internal/linkedlist
 * (`_idleNext`/`_idlePrev`), reached through its handles in
 * `process._getActiveHandles()`; each handle taken is unlinked and the ring
 * left empty, so node:cluster closes nothing of it. Unix socket ports, and a
 * Node whose internals differ, give none.
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
