/**
 * The browser bundle with every form (``dist/ldp-sdk-full.min.js``): the core
 * (``browser.ts``) plus ``forms.ts``, all registered on load.  Pages that use
 * neither strings nor the sketches load ``dist/ldp-sdk.min.js`` instead.
 *
 * @example
 *   import { openBrowserClient } from "/ldp-sdk-full.min.js";
 */
import { registerAllForms } from "./forms.js";

export * from "./browser.js";
export * from "./forms.js";
registerAllForms();
