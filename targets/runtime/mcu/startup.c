/* Reset and vector table of the bare-metal check image (Cortex-M, QEMU's mps2-an500).
 *
 * What a microcontroller does before main: copy .data's image from flash to RAM, zero
 * .bss, turn on the FPU (the model is built with -mfloat-abi=hard), open semihosting's
 * stdio (newlib's librdimon: files and the console go to the host through QEMU), run
 * main and report its return code as the exit status QEMU exits with. The image is
 * linked with -nostartfiles, so nothing else runs first. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern uint32_t __data_start__, __data_end__, __data_load__, __bss_start__, __bss_end__;
extern uint32_t __stack_top__;
extern void initialise_monitor_handles(void); /* librdimon */
extern void __libc_init_array(void);
int main(void);

void es_reset_handler(void);
void es_fault_handler(void);

/* CPACR: full access to coprocessors 10 and 11, the FPU */
#define ES_CPACR (*(volatile uint32_t *)0xE000ED88u)

void es_reset_handler(void) {
    ES_CPACR |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    memcpy(&__data_start__, &__data_load__,
           (size_t)((char *)&__data_end__ - (char *)&__data_start__));
    memset(&__bss_start__, 0, (size_t)((char *)&__bss_end__ - (char *)&__bss_start__));
    initialise_monitor_handles();
    __libc_init_array();
    exit(main());
}

/* what crti.o would hold (-nostartfiles leaves it out): nothing to run, C has no
 * constructors here, but newlib's init/fini walkers call them */
void _init(void);
void _fini(void);
void _init(void) {}
void _fini(void) {}

/* a fault (bad address, undefined instruction, stack overflow into nothing) ends the run
 * with status 3 instead of hanging QEMU */
void es_fault_handler(void) { exit(3); }

__attribute__((section(".vectors"), used)) static void (*const es_vectors[16])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top__, /* initial stack pointer */
    es_reset_handler,                          /* reset */
    es_fault_handler,                          /* NMI */
    es_fault_handler,                          /* hard fault */
    es_fault_handler,                          /* memory management fault */
    es_fault_handler,                          /* bus fault */
    es_fault_handler,                          /* usage fault */
};
