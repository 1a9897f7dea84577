/**
 * Where the primary touches the process and the OS: signals, `node:cluster`
 * and time. The primary, the fleet and the drain take these as parameters, so
 * unit tests replace them with fakes (a fake clock, fake workers that are
 * EventEmitters) and run the drain, the reload and the restart backoff exactly,
 * without processes or sleeps.
 */
import cluster, {type Address, type Worker} from 'node:cluster';
import type {EventEmitter} from 'node:events';
import type {Readable} from 'node:stream';
import {systemClock, type Clock} from '../clock.js';
import {own} from '../own-signals.js';
import {HandoffWatch, type RawHandle} from './handoffs.js';

/** What the fleet needs of one forked worker: a subset of `cluster.Worker`. */
export interface WorkerHandle extends Pick<EventEmitter, 'on' | 'once' | 'off'> {
	readonly id: number;
	readonly pid: number;
	readonly stdout: Readable | null;
	readonly stderr: Readable | null;
	send(message: unknown, callback: (error: Error | null) => void): void;
	isConnected(): boolean;
	disconnect(): void;
	/** Signals the process itself (`worker.process.kill`), never through the channel. */
	kill(signal: NodeJS.Signals): void;
}

export interface WorkerHandleEvents {
	listening: (address: Address) => void;
	message: (raw: unknown) => void;
	error: (error: Error) => void;
	exit: (code: number | null, signal: NodeJS.Signals | null) => void;
	disconnect: () => void;
}

export interface ForkSetup {
	readonly exec: string;
	readonly args: readonly string[];
	readonly execArgv: readonly string[];
	/** undefined: the primary's own. */
	readonly cwd?: string | undefined;
}

export interface ClusterEdge {
	setupPrimary(setup: ForkSetup): void;
	fork(env: Readonly<Record<string, string>>): WorkerHandle;
	/** Who takes the connections node:cluster strands in the primary (handoffs.ts); set once, before the first fork. */
	onStranded(listener: (handle: RawHandle) => void): void;
}

export interface ProcessEdges {
	readonly clock: Clock;
	readonly cluster: ClusterEdge;
	/** Installs a handler for a signal to this process; it stays for the process's life. */
	onSignal(signal: NodeJS.Signals, handler: (signal: NodeJS.Signals) => void): void;
}

let strandedListener = (handle: RawHandle): void => {
	(handle as {close?: () => void}).close?.();
};

const handoffs = new HandoffWatch(handle => {
	strandedListener(handle);
});

function handle(worker: Worker): WorkerHandle {
	handoffs.watch(worker);
	return {
		id: worker.id,
		pid: worker.process.pid ?? 0,
		stdout: worker.process.stdout,
		stderr: worker.process.stderr,
		on: worker.on.bind(worker),
		once: worker.once.bind(worker),
		off: worker.off.bind(worker),
		send(message, callback) {
			worker.send(message as Parameters<Worker['send']>[0], undefined, callback);
		},
		isConnected: () => worker.isConnected(),
		disconnect() {
			handoffs.leave(worker.id);
			worker.disconnect();
		},
		kill(signal) {
			worker.process.kill(signal);
		},
	} as WorkerHandle;
}

export const realEdges: ProcessEdges = {
	clock: systemClock,
	cluster: {
		setupPrimary({exec, args, execArgv, cwd}) {
			// Piped stdio (`silent`): two workers writing at once cannot interleave
			// half-lines, and the primary keeps a crashing app's last stderr lines.
			cluster.setupPrimary({exec, args: [...args], execArgv: [...execArgv], silent: true, cwd});
		},
		fork: env => handle(cluster.fork({...env})),
		onStranded(listener) {
			strandedListener = listener;
		},
	},
	onSignal(signal, handler) {
		process.on(signal, own(handler));
	},
};
