import { LabIcon } from '@jupyterlab/ui-components';

/** Four devices joined in a ring: the sidebar's and chart tabs' icon (themed grey). */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 4.5a7.5 7.5 0 1 1 0 15 7.5 7.5 0 0 1 0-15zm0 1.6a5.9 5.9 0 1 0 0 11.8 5.9 5.9 0 0 0 0-11.8z"/>
    <rect x="9" y="1" width="6" height="6" rx="1"/>
    <rect x="9" y="17" width="6" height="6" rx="1"/>
    <rect x="1" y="9" width="6" height="6" rx="1"/>
    <rect x="17" y="9" width="6" height="6" rx="1"/>
  </g>
</svg>`;

export const workbenchIcon = new LabIcon({
  name: 'dtrain-workbench:icon',
  svgstr: svg
});

/**
 * The launcher card's picture: the same ring of four devices, in colour, around a falling loss
 * curve. The launcher draws a "Notebook" card's icon from an image URL (`kernelIconUrl`).
 */
const launcherSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="52" height="52" viewBox="0 0 24 24">
  <circle cx="12" cy="12" r="7" fill="none" stroke="#90a4ae" stroke-width="1.4"/>
  <g fill="#1976d2">
    <rect x="9" y="1" width="6" height="5" rx="1"/>
    <rect x="9" y="18" width="6" height="5" rx="1"/>
    <rect x="1" y="9.5" width="5" height="5" rx="1"/>
    <rect x="18" y="9.5" width="5" height="5" rx="1"/>
  </g>
  <polyline points="8.2,9 10,12.2 12,13.6 14,14.4 15.8,14.8" fill="none" stroke="#f57c00"
    stroke-width="1.5" stroke-linecap="round" stroke-linejoin="round"/>
</svg>`;

export const workbenchIconUrl = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(launcherSvg)}`;
