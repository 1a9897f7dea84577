/**
 * Preloaded into every worker by the primary (`node --require <this> app.js`;
 * one CommonJS file in the bundle, scripts/bundle.js), before the app's first
 * line runs. Its jobs:
 *
 * 1. Keep the worker alive on a signal sent to the process group. A terminal's Ctrl-C
 *    signals the whole foreground process group and systemd's default
 *    `KillMode=control-group` signals every process of the unit, so workers get
 *    the signal too. Dying there would drop the requests in flight; instead the
 *    worker waits for the primary's drain message. The same for every other
 *    signal the primary handles (src/signals.ts).
 * 2. Open the IPC channel, so a drain that arrives while the app is still
 *    starting is not lost.
 * 3. Beat (heartbeat.ts): prove to the primary, once a second from the main
 *    loop, that the loop runs.
 * 4. Hold the app's own SIGTERM/SIGINT listeners (signal-listeners.ts), so that
 *    its hand-written shutdown runs after the drain instead of against it.
 * 5. Drain every HTTP, HTTPS and HTTP/2 server the worker listens on, as it
 *    begins to listen (listening-servers.ts, attach.ts), unless the app left it
 *    out (`exclude()`) or `--auto-attach off`; the app's `attach()` calls come
 *    here too (channel.ts `attach`), so a process has one drain whichever copy
 *    of the helper the app loaded.
 *
 * A worker with no server to drain (a raw `net` protocol, a queue consumer, one
 * still loading) gets the basic drain: the primary disconnects it when the
 * reject phase ends (one still loading, once it listens) and kills it at the
 * deadline. Its held signal listeners run at that disconnect, or at the reject
 * phase's end if that comes first.
 */
import cluster from 'node:cluster';
import {fileURLToPath} from 'node:url';
import {createLogger} from '../logger.js';
import {UNSENT_HOOK_FAILURE_EXIT} from '../protocol.js';
import {HANDLED_SIGNALS, SIGNAL_ACTIONS, type HandledSignal} from '../signals.js';
import {rejectEndsAt, remaining} from '../timeline.js';
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

// `child_process.fork()` copies `execArgv`, so the app's own children would load
// this file too and then ignore SIGTERM; take it out of what they inherit.
// `--require <path>` as the bundle's primary passes it; `--import <url>` as
// the compiled tree's does (package-files.ts bootstrapPreload).
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
	// From the drain on, what the worker prints must reach the primary even if
	// the app exits right after printing it (stdio.ts).
	channel.listeners.add(() => {
		blockOutput();
	});

	startHeartbeat(channel, logger, heartbeat);
	// The process's drain, made with the first server it takes: a worker that
	// never has one (a queue consumer) says nothing of a drain to the primary.
	let drained: Attachments | undefined;
	const attachments = (): Attachments => {
		drained ??= loadHosts().hostCluster(channel, logger, () => {
			servers.stopListening();
		});
		return drained;
	};

	// Before the app's first listen(); those the drain does not take are followed here.
	const servers = followServers(server => (autoAttach && drainableKind(server) !== undefined && !isExcluded(server) ? attachments().take(server as DrainableServer) : drained?.has(server) ?? false), server => {
		// node:cluster tells the primary nothing of it: the worker does, once it listens.
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

	// The app's listeners for every signal the primary drains or reloads on, a
	// `--require` preload's (an APM agent's) included: held from here on.
	const held = holdSignalListeners({ownExisting: true, signals: HANDLED_SIGNALS.filter(signal => SIGNAL_ACTIONS[signal] !== 'ignore')});

	const onSignal = (signal: NodeJS.Signals): void => {
		if (SIGNAL_ACTIONS[signal as HandledSignal] === 'drain') {
			held.received ??= signal;
			logger.info({signal}, 'signal received by the worker; waiting for the primary to drain it');
		} else {
			logger.info({signal}, 'signal received by the worker; only the primary acts on it');
		}
	};

	// Every signal the primary handles reaches the workers too when it is sent to
	// the process group (Ctrl-C, Ctrl-\, a closed terminal, systemd's
	// KillMode=control-group): only the primary acts on it. Ours, past the
	// holding: the app's `removeAllListeners()` leaves them.
	for (const signal of HANDLED_SIGNALS) {
		held.listenOurselves(signal, onSignal);
	}

	// A worker with no server to drain gets the basic drain: the primary
	// disconnects it when the reject phase ends (in a reload, after the linger). Nothing
	// here knows its requests, so the app's own shutdown runs then, from the
	// leave message's timeline: waiting for the disconnect would wait for every
	// connection to close, which a gRPC client channel never does before the
	// app's own `tryShutdown()`; or at the disconnect, if that comes first. The
	// timer is ref'd: once the disconnect has closed the servers and the
	// channel, nothing else may keep the process alive until it fires.
	// The drain takes the listeners over otherwise (cluster-host.ts).
	//
	// An app still loading then (a slow import, its database first) is not
	// listening yet: the primary disconnects such a worker once it listens
	// (primary/drain.ts), and the listeners it registered by then run at that
	// disconnect. When the leave found none (the app still loading, or one that
	// registers its shutdown lazily), each listener registered after the
	// disconnect runs as soon as it is registered, not never: the process would
	// otherwise wait for the deadline's SIGKILL with its cleanup undone. When
	// it found some, they are all: a listener their own shutdown registers ("a
	// second SIGTERM forces the exit") is not called; nor, either way, one our
	// call of a listener registers.
	//
	// A listener that fails after the primary disconnected this worker cannot
	// say so over IPC: the exit code does, where the process would have exited
	// 0 (protocol.ts).
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
		// The servers the drain does not take: the app closes them again after
		// they stopped listening, and either close succeeds (listening-servers.ts).
		// Retired by a reload, the worker stops listening on them now; drained,
		// as its drained servers do (cluster-host.ts), or at node:cluster's
		// disconnect when it has none (primary/drain.ts).
		servers.drain();
		if (message.type === 'retire') {
			servers.stopListening();
		}

		if (held.owner !== 'bootstrap') {
			return;
		}

		// `pending` until the leave has looked; `done`: the listeners the app had
		// then ran, and that is all; `late`: it had none (still loading, or
		// lazy), so each it registers from then on runs, but for those our own
		// call of a listener registers (`calling`).
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
				return;
			}

			if (leave === 'pending') {
				leave = 'done';
			}

			// The app's own shutdown, re-raising its signal when done with no listener
			// left for it (terminus, NestJS), means to end the process: it ends.
			held.onSelfSignal = sent => {
				if (endsProcess(held, sent)) {
					process.exit(0);
				}
			};

			logger.info({listeners: entries.map(entry => listenerName(entry, signal)), signal}, 'running the app\'s own signal listeners');
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
			// Not listening yet (node:cluster's own word for it, `worker.state`,
			// which it sets on a server's first 'listening'; not in its types): the
			// app is still loading, and the primary disconnects this worker once it
			// listens; its listeners run then, not against a server that has not
			// begun. Without the word (another Node), at once as before.
			const state = (cluster.worker as {state?: string} | undefined)?.state;
			if (state !== undefined && state !== 'listening' && process.connected) {
				return;
			}

			runListeners();
		}, at);
		held.listenOurselves('disconnect', runListeners);
	});
}
