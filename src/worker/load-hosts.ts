/**
 * Loads hosts.ts, the drain's own code, when a process first needs it: at
 * once, as the take of a server or an attach() call needs it there. In the
 * bundle this module is replaced by one that loads worker/hosts.cjs
 * (scripts/bundle.js), which the bootstrap and the helper of one install
 * share; here, in the compiled tree, Node 20.19+ `require()`s the ES module.
 */
import {createRequire} from 'node:module';
import type * as Hosts from './hosts.js';

export function loadHosts(): typeof Hosts {
	return createRequire(import.meta.url)('./hosts.js') as typeof Hosts;
}
