import { LabIcon } from '@jupyterlab/ui-components';

/** Four devices joined in a ring: the sidebar's and launcher card's icon. */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 4.5a7.5 7.5 0 1 1 0 15 7.5 7.5 0 0 1 0-15zm0 1.6a5.9 5.9 0 1 0 0 11.8 5.9 5.9 0 0 0 0-11.8z"/>
    <rect x="9" y="1" width="6" height="6" rx="1"/>
    <rect x="9" y="17" width="6" height="6" rx="1"/>
    <rect x="1" y="9" width="6" height="6" rx="1"/>
    <rect x="17" y="9" width="6" height="6" rx="1"/>
  </g>
</svg>`;

export const workbenchIcon = new LabIcon({ name: 'dtrain-workbench:icon', svgstr: svg });
