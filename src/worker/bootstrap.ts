/**
 * Preloaded into every worker, before the app's first line. It keeps the worker
 * alive through a signal sent to the process group (Ctrl-C, systemd's
 * `KillMode=control-group`): only the primary acts on signals. It opens the IPC
 * channel, beats, holds the app's own signal listeners so that its shutdown runs
 * after the drain, and gives every HTTP server the worker listens on to the drain:
 * one drain per process, whichever copy of the helper the app loaded.
 *
 * A worker with no server to drain (a raw `net` protocol, a queue consumer) gets the
 * basic drain: the primary disconnects it when the reject phase ends and kills it at
 * the deadline.
 */
import cluster from 'node:cluster';
import os from 'node:os';
import {fileURLToPath} from 'node:url';
import {createLogger} from '../logger.js';
import {UNSENT_HOOK_FAILURE_EXIT} from '../protocol.js';
import {HANDLED_SIGNALS, SIGNAL_ACTIONS, type HandledSignal} from '../signals.js';
import {LISTEN_SETTLE_MS, rejectEndsAt, remaining} from '../timeline.js';
import {readWorkerEnv} from '../worker-env.js';
import type {Attachments} from './attach.js';
import {leaveSignal, openChannel} from './channel.js';
import {drainableKind, isExcluded, type DrainableServer} from './filter.js';
import {followServers, formatAddress} from './listening-servers.js';
import {loadHosts} from './load-hosts.js';
import {startHeartbeat} from './heartbeat.js';
import {answerScrape} from './metrics.js';
import {callListeners, endsProcess, holdSignalListeners, listenerName, listenersFor} from './signal-listeners.js';
import {blockOutput} from './stdio.js';
import {ExitWatch} from './app-exit.js';

// `child_process.fork()` copies `execArgv`, so the app's own children would load this
// file too and then ignore SIGTERM. `--require <path>` is the bundle's form, `--import
// <url>` the compiled tree's (package-files.ts bootstrapPreload).
for (const [flag, self] of [['--require', fileURLToPath(import.meta.url)], ['--import', import.meta.url]] as const) {
	for (let index = process.execArgv.indexOf(self); index > 0 && process.execArgv[index - 1] === flag; index = process.execArgv.indexOf(self)) {
		process.execArgv.splice(index - 1, 2);
	}
}

// Only a cluster worker of ours has a primary to wait for (`NODE_UNIQUE_ID`, which
// makes `cluster.isWorker`, is gone from the environment of anything it starts).
if (cluster.isWorker && cluster.worker) {
	const workerId = cluster.worker.id;
	const {logLevel, heartbeat, autoAttach} = readWorkerEnv(process.env);
	const logger = createLogger({role: 'worker', level: logLevel, workerId});

	const channel = openChannel(workerId, {
		invalid(reason) {
			logger.warn({reason}, 'ignored a malformed graceful-cluster message from the primary');
		},
		metricsRequest: answerScrape,
	});
	// From the drain on, what the worker prints must reach the primary even if the app
	// exits right after printing it.
	channel.listeners.add(() => {
		blockOutput();
	});

	startHeartbeat(channel, logger, heartbeat);
	// Made with the first server: a worker that never has one says nothing of a drain.
	let drained: Attachments | undefined;
	const attachments = (): Attachments => {
		drained ??= loadHosts().hostCluster(channel, logger, () => {
			servers.stopListening();
		});
		return drained;
	};

	let listened = false;
	const servers = followServers(server => {
		listened = true;
		return autoAttach && drainableKind(server) !== undefined && !isExcluded(server) ? attachments().take(server as DrainableServer) : drained?.has(server) ?? false;
	}, server => {
		listened = true;
		// node:cluster tells the primary nothing of it: the worker does.
		server.once('listening', () => {
			const address = formatAddress(server.address());
			logger.info({address}, 'a server listens without node:cluster (listen({exclusive: true})): it takes its connections itself, not through the primary');
			channel.send({type: 'listening-apart', address: address.slice(0, 4096)});
		});
	});
	channel.attach = (server, options) => {
		const handle = attachments().attach(server, options);
		servers.forget(server);
		return handle;
	};

	channel.exclude = server => {
		if (drained?.has(server)) {
			drained.exclude(server);
			servers.follow(server);
		}
	};

	const held = holdSignalListeners({ownExisting: true, signals: HANDLED_SIGNALS.filter(signal => SIGNAL_ACTIONS[signal] !== 'ignore')});

	const onSignal = (signal: NodeJS.Signals): void => {
		if (SIGNAL_ACTIONS[signal as HandledSignal] === 'drain') {
			held.received ??= signal;
			logger.info({signal}, 'signal received by the worker; waiting for the primary to drain it');
		} else {
			logger.info({signal}, 'signal received by the worker; only the primary acts on it');
		}
	};

	// A signal sent to the process group (Ctrl-C, a closed terminal, systemd's
	// KillMode=control-group) reaches the workers too: only the primary acts on it.
	for (const signal of HANDLED_SIGNALS) {
		held.listenOurselves(signal, onSignal);
	}

	// The basic drain: the app's own listeners run at the reject phase's end (a reload:
	// the linger's), or at the disconnect if that comes first; not only at the disconnect,
	// which waits for every connection to close (a gRPC client channel never closes before
	// the app's `tryShutdown()`). The timer is ref'd: after the disconnect nothing else may
	// keep the process alive. A listener that fails after the disconnect says so by the
	// exit code.
	let unsentFailures = false;
	const failedUnsent = (): void => {
		if (!unsentFailures) {
			unsentFailures = true;
			held.listenOurselves('exit', (code: number) => {
				if (code === 0) {
					process.exitCode = UNSENT_HOOK_FAILURE_EXIT;
				}
			});
		}
	};

	channel.listeners.add(({message, receivedAt}) => {
		// Servers the drain does not take stop listening now in a retire; in a drain, with
		// the drained ones (cluster-host.ts).
		servers.drain();
		if (message.type === 'retire') {
			servers.stopListening();
		}

		if (held.owner !== 'bootstrap') {
			return;
		}

		// `late`: the leave found no listener, so each registered later runs, but for those
		// our own call of a listener registers (`calling`).
		let leave: 'pending' | 'done' | 'late' = 'pending';
		let calling = false;
		let scheduled = false;
		const onHeld = (): void => {
			if (!calling && !scheduled && !process.connected) {
				scheduled = true;
				setImmediate(() => {
					scheduled = false;
					runListeners();
				});
			}
		};

		const runListeners = (): void => {
			if (leave === 'done' || held.owner !== 'bootstrap') {
				return;
			}

			clearTimeout(timer);
			const signal = leaveSignal(message, held.received);
			const entries = listenersFor(held, signal, {retiring: message.type === 'retire'});
			if (entries.length === 0) {
				leave = 'late';
				held.onHeld = onHeld;
				// A worker that serves nothing and has no listener for the signal would die of it
				// under plain Node: so it does, once a listener about to be added has had its moment.
				if (!listened) {
					setTimeout(() => {
						if (leave === 'late') {
							logger.info({signal}, 'the app has no listener for the signal: the worker ends as Node would end it');
							process.exit(128 + os.constants.signals[signal]);
						}
					}, LISTEN_SETTLE_MS).unref();
				}

				return;
			}

			if (leave === 'pending') {
				leave = 'done';
			}

			// Re-raising its signal with no listener left (terminus, NestJS) means to end the process.
			held.onSelfSignal = sent => {
				if (endsProcess(held, sent)) {
					process.exit(0);
				}
			};

			const names = entries.map(entry => listenerName(entry, signal));
			logger.info({listeners: names, signal}, 'running the app\'s own signal listeners');
			new ExitWatch(logger).blame(names.join(', '));
			calling = true;
			try {
				callListeners(held, entries, signal, (name, error) => {
					logger.error({err: error, hook: name}, 'a shutdown hook failed; running the rest');
					if (process.connected) {
						channel.send({type: 'hook-failed', hook: name.slice(0, 4096)});
					} else {
						failedUnsent();
					}
				});
			} finally {
				calling = false;
			}
		};

		const at = message.type === 'drain' ? rejectEndsAt(remaining(message, performance.now() - receivedAt)) : message.lingerMs;
		const timer = setTimeout(() => {
			// Not listening yet (`worker.state`, not in node:cluster's types): the app is still
			// loading; the primary disconnects this worker once it listens, and its listeners run then.
			const state = (cluster.worker as {state?: string} | undefined)?.state;
			if (state !== undefined && state !== 'listening' && process.connected) {
				return;
			}

			runListeners();
		}, at);
		held.listenOurselves('disconnect', runListeners);
	});
}
