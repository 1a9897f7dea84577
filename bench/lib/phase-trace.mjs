// Preloaded (`node --import`) by start-phases.js into a primary: appends to
// $PHASE_LOG when this process's own code began (the preload itself, after
// Node's bootstrap) and when it called cluster.fork(), in ms on the process's
// performance clock. It leaves itself out of the workers' execArgv, so they
// start as they would without it.
import cluster from 'node:cluster';
import {appendFileSync} from 'node:fs';
import process from 'node:process';

if (cluster.isPrimary) {
	const log = what => appendFileSync(process.env.PHASE_LOG, `${what} ${performance.now().toFixed(2)}\n`);
	log('code');
	const {fork, setupPrimary} = cluster;
	const self = process.execArgv.indexOf(import.meta.url);
	const without = execArgv => execArgv?.filter((arg, index, all) => arg !== import.meta.url && !(arg === '--import' && all[index + 1] === import.meta.url));
	if (self > 0) {
		process.execArgv.splice(self - 1, 2);
	}

	cluster.setupPrimary = function (settings = {}) {
		return setupPrimary.call(this, {...settings, ...(settings.execArgv ? {execArgv: without(settings.execArgv)} : {})});
	};

	cluster.fork = function (...args) {
		log('fork');
		return fork.apply(this, args);
	};
}
