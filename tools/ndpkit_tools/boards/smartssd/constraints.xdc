# ndpkit on the Samsung SmartSSD (xcku15p-ffva1156-2LV-e).
# Timing and configuration only: the pin assignments come from the SmartSSD board
# files (not public), named by local.toml; see README.md.

set_property CONFIG_VOLTAGE 1.8                        [current_design]
set_property BITSTREAM.GENERAL.COMPRESS TRUE           [current_design]
set_property CONFIG_MODE SPIx4                         [current_design]
set_property BITSTREAM.CONFIG.SPI_BUSWIDTH 4           [current_design]

create_clock -period 10.000 -name pcie_refclk [get_ports pcie_refclk_clk_p]
set_false_path -from [get_ports pcie_perstn]
create_clock -period 3.332 -name ddr4_refclk [get_ports ddr4_refclk_clk_p]
set_clock_groups -asynchronous -group [get_clocks -include_generated_clocks pcie_refclk] \
    -group [get_clocks -include_generated_clocks ddr4_refclk]
