/**
 * Loads hosts.ts, synchronously: a server's take needs it at once. The bundle
 * replaces this module with one that loads worker/hosts.cjs (scripts/bundle.js);
 * in the compiled tree, Node 20.19+ `require()`s the ES module.
 */
import {createRequire} from 'node:module';
import type * as Hosts from './hosts.js';

export function loadHosts(): typeof Hosts {
	return createRequire(import.meta.url)('./hosts.js') as typeof Hosts;
}
