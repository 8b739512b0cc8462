// Command minimax-m3 deploys MiniMax M3 NVFP4 on NVIDIA Dynamo and vLLM to GB200 NVL72 racks.
package main
