/**
 * The worker helper apps load: `import {attach} from 'graceful-cluster/worker'`
 * (or `require`). Kept light, with no top-level await, so CommonJS apps can
 * `require()` it on Node 20.19+: only `node:` built-ins.
 *
 * Under the graceful-cluster CLI the worker's bootstrap has the drain, and
 * every server is drained as it listens: attach() hands its server and options
 * to that drain (channel.ts `attach`). Run with plain `node server.js`, the
 * helper loads the drain itself (hosts.ts), which takes SIGTERM/SIGINT on the
 * timeline read from `GRACEFUL_CLUSTER_*`.
 */
import type * as net from 'node:net';
import {damagedFiles} from '../install-check.js';
import {checkAttachable, checkExcludable, type Attachments} from './attach.js';
import type {AttachOptions, GracefulHandle} from './handle.js';
import {getChannel} from './channel.js';
import {markExcluded, type DrainableServer} from './filter.js';
import {loadHosts} from './load-hosts.js';

export type {AttachOptions, GracefulHandle} from './handle.js';
export type {PhaseName} from './phase.js';
export type {ShutdownHook} from './hooks.js';
export type {DrainListener, DrainNotice, DrainReason} from './long-lived.js';
export type {MetricsRegistry} from './metrics.js';
export type {ReadinessCheck, ReadinessChecks} from './readiness.js';

/** This copy's own drain: standalone, or under a bootstrap of an older version that takes no server. */
let own: Attachments | undefined;

let checked = false;

/**
 * The helper may be the app's own copy of the package: a partial one is said
 * at its first call, as the app starts, not at its drain. Bundled into the
 * app's CommonJS build it has no URL of its own (esbuild leaves import.meta
 * empty), and no files to check.
 */
function checkInstall(): void {
	if (checked) {
		return;
	}

	const damaged = (import.meta.url as string | undefined) ? damagedFiles(new URL('../graceful-cluster-files.json', import.meta.url), 'worker/') : [];
	if (damaged.length > 0) {
		throw new Error(`graceful-cluster/worker: its installation is incomplete: ${damaged.join('; ')}. Reinstall graceful-cluster with its dependencies (npm ci).`);
	}

	checked = true;
}

/**
 * Gives `server` its drain options and returns the handle: any `node:http` or
 * `node:https` server (raw, Express's `app.listen()`, `fastify.server`, Koa's
 * `app.listen()`), or a `node:http2` one (`http2.createServer()`,
 * `http2.createSecureServer()`, with or without `allowHTTP1`). Under the
 * graceful-cluster CLI every such server is drained as it listens, attached or
 * not: attach() adds its options, before or after `listen()`, and a second call
 * changes nothing else. Run with plain `node`, only the servers passed here
 * are drained.
 */
export function attach(server: DrainableServer, options: AttachOptions = {}): GracefulHandle {
	checkAttachable(server, options);
	checkInstall();
	const delegate = getChannel()?.attach;
	if (delegate) {
		return delegate(server, options);
	}

	own ??= loadHosts().hostHelper();
	return own.attach(server, options);
}

/**
 * Leaves `server` out of the drain: no filter, no probes; it serves as it
 * would without graceful-cluster, until the app closes it or the worker
 * exits, and `drain finished` counts it as `uncounted`. Call it before
 * `listen()` (or after: the drain lets go of it then).
 */
export function exclude(server: net.Server): void {
	checkExcludable(server);
	markExcluded(server, true);
	const channel = getChannel();
	if (channel?.exclude) {
		channel.exclude(server);
	} else {
		own?.exclude(server);
	}
}
