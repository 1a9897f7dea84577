/** The drain's own code, loaded (load-hosts.ts) only when a process first needs a drain. */
import {systemClock} from '../clock.js';
import {ExitCode} from '../exit-codes.js';
import {UsageError} from '../errors.js';
import {createLogger} from '../logger.js';
import {settingsFromEnv} from '../settings.js';
import {logLevelFromEnv} from '../worker-env.js';
import {Attachments} from './attach.js';
import {getChannel} from './channel.js';
import {hostCluster} from './cluster-host.js';
import {ProcessDrain} from './drain.js';
import {runStandalone} from './standalone.js';

export {hostCluster} from './cluster-host.js';

/** Under an older bootstrap that takes no server, the cluster's drain; with no bootstrap (plain `node`), one that takes the signals itself. */
export function hostHelper(): Attachments {
	const level = logLevelFromEnv(process.env);
	const channel = getChannel();
	if (channel) {
		return hostCluster(channel, createLogger({role: 'worker', level, workerId: channel.workerId}));
	}

	let settings;
	try {
		settings = settingsFromEnv(process.env);
	} catch (error) {
		// A malformed GRACEFUL_CLUSTER_* value: better to stop at start than to drain on a
		// timeline nobody meant.
		if (error instanceof UsageError) {
			process.stderr.write(`graceful-cluster: ${error.message}\n`);
			process.exit(ExitCode.USAGE);
		}

		throw error;
	}

	const logger = createLogger({role: 'standalone', level});
	// Alone, nothing reads the peers' rates: no primary, no /status.
	const drain = new ProcessDrain(settings, logger, systemClock, {peerRates: false});
	runStandalone(drain, logger, settings);
	return new Attachments(drain, {checkTimeoutMs: settings.checkTimeoutMs});
}
