/**
 * Puts the right filter in front of an attached server: the HTTP/1.1 adapter
 * for node:http and node:https servers, the HTTP/2 adapter for node:http2 ones
 * (filter.ts `drainableKind`), with the settings each needs.
 */
import type {Server} from 'node:http';
import type {Logger} from '../logger.js';
import type {WorkerSettings} from '../settings.js';
import {drainableKind, type DrainableServer, type FilterOptions, type ServerFilter} from './filter.js';
import {RequestFilter} from './http1-filter.js';
import {Http2Filter, type Http2AnyServer} from './http2-filter.js';
import type {NoticeCode} from '../protocol.js';
import type {Arrivals} from './arrivals.js';

export interface FilterWiring {
	readonly logger: Logger;
	/** The last request in flight of this server finished during a drain. */
	readonly onIdle: () => void;
	/** How long a connection the drain closes may linger now. */
	readonly lingerMs: () => number;
	/** The process's arrival telemetry, shared by its filters. */
	readonly arrivals: Arrivals;
	readonly onNotice?: ((code: NoticeCode) => void) | undefined;
}

export function createFilter(server: DrainableServer, settings: WorkerSettings, {logger, onIdle, lingerMs, arrivals, onNotice}: FilterWiring): ServerFilter {
	const options: FilterOptions = {
		retryAfterSeconds: settings.retryAfterSeconds,
		readinessPath: settings.readinessPath,
		livenessPath: settings.livenessPath,
		// Only made when debug is on: at info, a rejected request costs no log call.
		onReject: logger.isLevelEnabled('debug')
			? request => {
				logger.debug(request, 'request rejected');
			}
			: undefined,
		onIdle,
		onLateListen(address) {
			logger.info({address}, 'a server began to listen after this worker had stopped listening (it was still starting at the drain); closing it');
		},
		lingerMs,
		arrivals,
		onNotice,
	};
	// HTTP/2 ends connections with GOAWAY, not `Connection: close`: an adapter of its own.
	if (drainableKind(server) === 'http2') {
		return new Http2Filter(server as Http2AnyServer, options);
	}

	// Only HTTP/1.1 has keep-alive timeouts (an HTTP/2 session has no idle timeout unless the app sets one).
	return new RequestFilter(server as Server, {...options, keepAliveTimeoutMs: settings.keepAliveTimeoutMs});
}
